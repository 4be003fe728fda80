package docs_test

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/phasepay/phasepay/internal/webhooks"
)

// Drift checks of what the operator's tools and the dev stack do, each
// against the code or the script that does it: each was once found wrong
// by trying it.

// The database's state words (started, needs_attention, done) and the four
// request states are tied by one table, in architecture.md, whose rows are
// the mapping the code makes (idempotency.requestStateSQL: started is
// in_progress while leased, unfinished otherwise; done is completed); the
// runbook, whose SQL uses the database's words, points at it and says it.
func TestStoredStatesMapToTheRequestStates(t *testing.T) {
	t.Parallel()
	arch := readDoc(t, "architecture.md")
	row := regexp.MustCompile("(?m)^\\| `(started|needs_attention|done)` \\|[^|]*\\| `([a-z_]+)`")
	got := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(arch, -1) {
		got[m[1]] = append(got[m[1]], m[2])
	}
	require.Equal(t, map[string][]string{
		"started":         {"in_progress", "unfinished"},
		"needs_attention": {"needs_attention"},
		"done":            {"completed"},
	}, got, "architecture.md's table of the state column and the request states")

	runbook := readDoc(t, "operations.md")
	require.Contains(t, runbook, "(architecture.md#the-state-machine)")
	require.Contains(t, runbook, "A `started` key is `in_progress` while its lease is held and\n`unfinished` otherwise; `done` is `completed`")
}

// docs/api.md names the requests that need an Idempotency-Key: exactly the
// operations of the OpenAPI document that require the header (capture,
// void and refund too, not only charges).
func TestIdempotencyKeyRequestsAreNamed(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Ref      string `yaml:"$ref"`
				Name, In string
				Required bool
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(repoRoot, "api", "openapi.yaml"))), &doc))
	var want []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for _, p := range op.Parameters {
				if p.Ref == "#/components/parameters/IdempotencyKey" || (p.Name == "Idempotency-Key" && p.Required) {
					want = append(want, strings.ToUpper(method)+" "+path)
				}
			}
		}
	}
	slices.Sort(want)
	require.GreaterOrEqual(t, len(want), 4)

	api := readDoc(t, "api.md")
	_, rest, ok := strings.Cut(api, "A request that moves money must carry an `Idempotency-Key` header:")
	require.True(t, ok, "api.md's Idempotent requests section no longer starts with the list")
	sentence, _, _ := strings.Cut(rest, ". ")
	var named []string
	for _, m := range regexp.MustCompile("`((?:POST|GET|DELETE) /[^`]+)`").FindAllStringSubmatch(sentence, -1) {
		named = append(named, m[1])
	}
	slices.Sort(named)
	require.Equal(t, want, named, "api.md's list of the requests that need an Idempotency-Key")
}

// The refusal of a webhook endpoint's private host is quoted in api.md and
// operations.md as the API words it, hint included.
func TestWebhookRefusalIsQuotedWhole(t *testing.T) {
	t.Parallel()
	err := webhooks.NewGuard(false).CheckHost(context.Background(), "10.0.0.5")
	require.ErrorIs(t, err, webhooks.ErrNotPublic)
	words := err.Error()
	require.Contains(t, words, "WEBHOOK_ALLOW_PRIVATE=1", "the refusal carries its hint")
	// Markdown may break the quoted detail across lines.
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	require.Contains(t, flat(readDoc(t, "api.md")), "`"+words+"`")
	_, hint, _ := strings.Cut(words, "url: ")
	require.Contains(t, flat(readDoc(t, "operations.md")), "`"+hint+"`")
}

// api.md says that stored error answers carry no request_id and why
// (byte-exact replay), beside where it says error bodies carry one.
func TestStoredAnswersCarryNoRequestIDIsSaid(t *testing.T) {
	t.Parallel()
	flat := strings.Join(strings.Fields(readDoc(t, "api.md")), " ")
	require.Contains(t, flat, "Error bodies repeat it as `request_id`, except the stored answers of idempotent requests")
	require.Contains(t, flat, "replayed byte for byte")
	require.Contains(t, flat, "| `request_id` | this request's id, as in `X-Request-Id`; absent from a stored answer, which is replayed byte for byte |")
}

// make run runs bin/mockpsp as a process of its own (scripts/run-dev), and
// api.md says so, not that it uses the mock inside bin/api.
func TestMakeRunsMockIsSaid(t *testing.T) {
	t.Parallel()
	script := readFile(t, filepath.Join(repoRoot, "scripts", "run-dev"))
	require.Contains(t, script, `"$bin/mockpsp"`, "run-dev starts bin/mockpsp")
	require.Regexp(t, `(?m)^\s*export PSP_URL="http://\$\{MOCKPSP_ADDR\}"$`, script, "the api and reaper of make run call it over HTTP")
	require.NotContains(t, script, "PSP_URL=embedded")
	flat := strings.Join(strings.Fields(readDoc(t, "api.md")), " ")
	require.Contains(t, flat, "which is what `make run` runs, or inside `bin/api` when `PSP_URL=embedded` (tests)")
	require.NotContains(t, flat, "(what `make run` uses)")
	mk := readFile(t, filepath.Join(repoRoot, "Makefile"))
	require.NotContains(t, mk, "embedded mock", "the Makefile's help of make run")
}

// The README's takeover says how long it takes: LEASE, at make run's value.
func TestTakeoverTakesTheLeaseSaysTheReadme(t *testing.T) {
	t.Parallel()
	m := regexp.MustCompile(`(?m)^export LEASE=\$\{LEASE:-(\d+)s\}$`).FindStringSubmatch(readFile(t, filepath.Join(repoRoot, "scripts", "run-dev")))
	require.NotNil(t, m, "run-dev sets LEASE")
	lease, err := time.ParseDuration(m[1] + "s")
	require.NoError(t, err)
	readme := strings.Join(strings.Fields(readFile(t, filepath.Join(repoRoot, "README.md"))), " ")
	require.NotContains(t, readme, "a few seconds", "a takeover takes LEASE, not a few seconds")
	require.Contains(t, readme, "takes `LEASE`, "+strconv.Itoa(int(lease.Seconds()))+" s under `make run`")
}

// The README says in its first lines that make run and make test are for
// Debian as root, and gives the other way (make compose-up); it names
// every address make run listens on with its variable and run-dev's
// default; and its commands use those addresses through variables, never
// as literal addresses (besides the one line that sets each).
func TestReadmeNamesThePortsAndTheHost(t *testing.T) {
	t.Parallel()
	readme := readFile(t, filepath.Join(repoRoot, "README.md"))
	head := strings.Join(strings.Fields(strings.Join(strings.SplitN(readme, "\n", 20)[:19], "\n")), " ")
	require.Contains(t, head, "Debian, run as root")
	require.Contains(t, head, "`make compose-up`")

	script := readFile(t, filepath.Join(repoRoot, "scripts", "run-dev"))
	checked := regexp.MustCompile(`(?m)^for var in (.+); do$`).FindStringSubmatch(script)
	require.NotNil(t, checked, "run-dev checks its addresses in one loop")
	for _, v := range []string{"API_ADDR", "MOCKPSP_ADDR", "CONSOLE_ADDR", "REAPER_METRICS_ADDR"} {
		m := regexp.MustCompile(`(?m)^export ` + v + `=\$\{` + v + `:-([^}]+)\}$`).FindStringSubmatch(script)
		require.NotNil(t, m, "run-dev sets %s", v)
		require.Contains(t, readme, "| `"+v+"` | `"+m[1]+"` |", "README's table of make run's addresses: %s", v)
		require.Contains(t, strings.Fields(checked[1]), v, "run-dev checks %s", v)
	}
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		for _, line := range strings.Split(block[1], "\n") {
			if strings.Contains(line, "http://127.0.0.1:") || strings.Contains(line, "http://localhost:") {
				require.Regexp(t, `^(API|PSP)=http://127\.0\.0\.1:\d+ +# http://\$(API_ADDR|MOCKPSP_ADDR)$`, line,
					"a README command names an address; use $API or $PSP")
			}
		}
	}
}

// attempts counts failed attempts: every interface that shows a key's
// count gives it as failed_attempts and defines attempts as its older
// name (the OpenAPI schema, api.md, requests list -h), so neither can
// be read as "attempts made".
func TestFailedAttemptsIsDefinedEverywhere(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string
				Properties map[string]struct {
					Description string
					Deprecated  bool
				}
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(repoRoot, "api", "openapi.yaml"))), &doc))
	key := doc.Components.Schemas["IdempotencyKey"]
	require.Contains(t, key.Required, "failed_attempts")
	require.Contains(t, key.Properties["failed_attempts"].Description, "ended without finishing")
	require.True(t, key.Properties["attempts"].Deprecated)
	require.Contains(t, key.Properties["attempts"].Description, "`failed_attempts`")

	flat := strings.Join(strings.Fields(readDoc(t, "api.md")), " ")
	require.Contains(t, flat, "`failed_attempts` (the attempts that ended without finishing")
	require.Contains(t, flat, "its older name `attempts` (the same number")
	require.NotRegexp(t, "`recovery_point`, `attempts`", flat, "attempts listed without its meaning")
	cmd := readFile(t, filepath.Join(repoRoot, "cmd", "api", "requests.go"))
	require.Contains(t, cmd, "failed_attempts (and\nattempts, the same number under its older name)")
}

// Webhook endpoint validation errors name the field in errors, like every
// other invalid body, and api.md says so.
func TestWebhookValidationErrorsAreDocumented(t *testing.T) {
	t.Parallel()
	flat := strings.Join(strings.Fields(readDoc(t, "api.md")), " ")
	require.Contains(t, flat, "A `url` or `events` that is not acceptable answers 400 `invalid_request` with `errors` naming the member")
	require.Contains(t, flat, "| `errors` | for `invalid_request`: one `{\"field\", \"message\"}` per invalid field (a webhook endpoint's `url` or `events` too) |")
}
