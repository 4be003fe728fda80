package docs_test

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Drift: every list the docs hold that the code holds too is checked
// against the code here (the request states, the alerts, the tables, the
// pitfall cross-references); the commands are checked in cmd/api
// (TestDocsNameEveryCommand), the environment variables in deploy/
// (TestEveryVariableIsDocumented).

// prose are the files a reader reads: the README, every doc here, and the
// deploy guide, relative to this directory.
func prose(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	require.NoError(t, err)
	return append(docs, filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "deploy", "README.md"))
}

// stateWord matches the words that can name a request state, or a stored
// state mistaken for one.
var stateWord = regexp.MustCompile(`\b(in_progress|unfinished|needs_attention|completed|done|started)\b`)

// Every list of request states in the docs and the OpenAPI document is the
// one idempotency.RequestStates holds, in its order (an alias may follow:
// "done is accepted"), and every state a doc filters on (--state X,
// ?state=X) is one the code accepts.
func TestRequestStatesAreOneVocabulary(t *testing.T) {
	t.Parallel()
	var want []string
	for _, st := range idempotency.RequestStates() {
		want = append(want, string(st))
	}
	files := append(prose(t), filepath.Join(repoRoot, "api", "openapi.yaml"))
	lists, filters := 0, 0
	filter := regexp.MustCompile(`(?:--state[ =]|[?&]state=)([a-z_]+)`)
	codeSpan := regexp.MustCompile("`[^`]*`")
	for _, f := range files {
		text := readFile(t, f)
		// In markdown the states are code, so only code spans count:
		// prose may say "done" in its own sense.
		units := blocks(text)
		if strings.HasSuffix(f, ".yaml") {
			units = nil // its enum lines; the enums are checked parsed below
			for _, line := range strings.Split(text, "\n") {
				if strings.Contains(line, "enum:") {
					units = append(units, line)
				}
			}
		}
		for _, para := range units {
			src := para
			if strings.HasSuffix(f, ".md") {
				src = strings.Join(codeSpan.FindAllString(para, -1), " ")
			}
			var order, named []string
			for _, w := range stateWord.FindAllString(src, -1) {
				if !slices.Contains(named, w) {
					named = append(named, w)
				}
				if _, alias := idempotency.RequestStateAliases()[w]; !alias && !slices.Contains(order, w) {
					order = append(order, w)
				}
			}
			// Three names of states in one statement are a list of them,
			// unless it lists the stored states (`started`), which the
			// database's column holds and no interface shows.
			if len(named) < 3 || slices.Contains(named, "started") {
				continue
			}
			lists++
			require.Equal(t, want, order, "%s lists the states otherwise than idempotency.RequestStates:\n%s", f, para)
		}
		for i, line := range strings.Split(text, "\n") {
			for _, m := range filter.FindAllStringSubmatch(line, -1) {
				filters++
				_, err := idempotency.ParseRequestState(m[1])
				require.NoError(t, err, "%s:%d filters on a state the code refuses: %s", f, i+1, line)
			}
		}
	}
	require.GreaterOrEqual(t, lists, 4, "too few lists of the states found: the check matches nothing?")
	require.GreaterOrEqual(t, filters, 4, "too few state filters found: the check matches nothing?")

	// The OpenAPI document: the key's state is one of RequestStates; the
	// filter accepts those and the aliases.
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name   string
				Schema struct{ Enum []string }
			}
		}
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct{ Enum []string }
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(repoRoot, "api", "openapi.yaml"))), &doc))
	var param []string
	for _, p := range doc.Paths["/v1/idempotency_keys"]["get"].Parameters {
		if p.Name == "state" {
			param = p.Schema.Enum
		}
	}
	aliases := slices.Sorted(func(yield func(string) bool) {
		for a := range idempotency.RequestStateAliases() {
			if !yield(a) {
				return
			}
		}
	})
	require.Equal(t, append(slices.Clone(want), aliases...), param, "GET /v1/idempotency_keys ?state=")
	found := false
	for name, s := range doc.Components.Schemas {
		if p, ok := s.Properties["state"]; ok && slices.Contains(p.Enum, "in_progress") {
			found = true
			require.Equal(t, want, p.Enum, "schema %s: state", name)
		}
	}
	require.True(t, found, "no schema of the OpenAPI document has the key's state")
}

// Every alert rule of deploy/prometheus/alerts.yaml is named, with its
// severity, in deploy/README.md and has its section in the runbook, and
// neither names an alert that is not a rule.
func TestAlertsAreDocumented(t *testing.T) {
	t.Parallel()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string
				Labels map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yaml"))), &rules))
	severity := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				severity[r.Alert] = r.Labels["severity"]
			}
		}
	}
	require.GreaterOrEqual(t, len(severity), 5)

	alertName := regexp.MustCompile(`\bPhasepay[A-Z][A-Za-z]+\b`)
	deployREADME := readFile(t, filepath.Join(repoRoot, "deploy", "README.md"))
	runbook := readFile(t, "operations.md")
	for alert, sev := range severity {
		require.Contains(t, deployREADME, "`"+alert+"` ("+sev+")", "deploy/README.md does not list %s (%s)", alert, sev)
		require.Contains(t, runbook, "**"+alert+"**", "operations.md does not say which case %s shows", alert)
	}
	for name, text := range map[string]string{"deploy/README.md": deployREADME, "docs/operations.md": runbook, "README.md": readFile(t, filepath.Join(repoRoot, "README.md"))} {
		for _, a := range alertName.FindAllString(text, -1) {
			_, ok := severity[a]
			require.True(t, ok, "%s names %s, which no alert rule is", name, a)
		}
	}
}

// The tables of architecture.md's Tables section are the tables a migrated
// database has (partitions aside), no more, no fewer.
func TestTablesAreDocumented(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	rows, err := pool.Query(context.Background(), `
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
   AND c.relname <> 'goose_db_version'
 ORDER BY 1`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		// A day partition not attached yet is a standalone table named
		// after its parent and its day.
		if !regexp.MustCompile(`_p\d{6,8}$`).MatchString(name) {
			tables = append(tables, name)
		}
	}
	require.NoError(t, rows.Err())

	_, section, ok := strings.Cut(readDoc(t, "architecture.md"), "\n## Tables\n")
	require.True(t, ok, "architecture.md has no ## Tables section")
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []string
	for _, line := range strings.Split(section, "\n") {
		if m := regexp.MustCompile("^\\| `([a-z_]+)` \\|").FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
		}
	}
	slices.Sort(documented)
	require.Equal(t, tables, documented, "architecture.md's Tables against the migrated schema")
	require.Contains(t, readDoc(t, "architecture.md"), numberWord(len(tables))+" tables", "architecture.md's overview counts the tables")
}

func numberWord(n int) string {
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
		"thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"}
	if n < len(words) {
		return words[n]
	}
	return "more than twenty"
}

// blocks splits a text into what a reader takes as one statement: each
// table row alone, else the lines between blank lines.
func blocks(text string) []string {
	var (
		out []string
		cur []string
	)
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(strings.TrimSpace(line), "|"):
			flush()
			out = append(out, line)
		default:
			cur = append(cur, line)
		}
	}
	flush()
	return out
}
