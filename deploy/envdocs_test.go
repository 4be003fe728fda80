package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// contractVariables are the variables the contract's configuration table
// names (the specification the black-box tests check, kept outside the
// repository), besides OTEL_*. DATABASE_POOLER and DATABASE_DIRECT_URL
// join them with the code that reads them.
var contractVariables = []string{
	"DATABASE_URL", "API_ADDR", "PSP_URL", "PSPS", "PSP_ROUTING",
	"MOCKPSP_ADDR", "MOCKPSP_NAME", "MOCKPSP_KEY_TTL", "LEASE", "REAPER_INTERVAL", "RETENTION",
	"RETRY_BASE", "RETRY_MAX", "GIVE_UP_AFTER", "METRICS_ADDR", "WEBHOOK_ALLOW_PRIVATE",
	"MOCKPSP_ERROR_RATE", "MOCKPSP_DROP_RATE", "MOCKPSP_REJECT_RATE", "MOCKPSP_LOOKUP_ERROR_RATE", "MOCKPSP_LATENCY",
}

// envDocPath is the doc whose table lists every variable the binaries read.
const envDocPath = "docs/operations.md"

// documentedVariables returns the variables named in the first column of
// the table under "### Every variable" in docs/operations.md.
func documentedVariables(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(envDocPath)))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n### Every variable\n")
	require.True(t, ok, "%s has no ### Every variable section", envDocPath)
	section, _, _ = strings.Cut(section, "\n#")
	// A PSP's own variables are written PSP_<NAME>_SUFFIX.
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]*(?:<NAME>_[A-Z0-9_]+)?\\*?)`")
	var names []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, m[1])
		}
	}
	require.NotEmpty(t, names)
	slices.Sort(names)
	return slices.Compact(names)
}

// Every environment variable bin/api, bin/reaper or bin/mockpsp reads is in
// the docs' table of variables, and every variable there is read by one of
// them (OTEL_* stands for the OpenTelemetry SDK's own); every variable the
// contract names is both.
func TestEveryVariableIsDocumented(t *testing.T) {
	t.Parallel()
	facts := codeFactsT(t)
	read := map[string]bool{}
	for _, names := range facts.env {
		for n := range names {
			read[n] = true
		}
	}
	documented := documentedVariables(t)
	// A PSP's own variable is read as a prefix (PSP_<NAME>_) and a suffix:
	// the code names the suffix alone.
	perPSP := map[string]bool{}
	for _, n := range documented {
		if suffix, ok := strings.CutPrefix(n, "PSP_<NAME>_"); ok {
			perPSP[suffix] = true
		}
	}
	for n := range read {
		if !strings.HasPrefix(n, "OTEL_") && !perPSP[n] {
			require.Contains(t, documented, n, "a binary reads %s, which %s's table of variables does not list", n, envDocPath)
		}
	}
	for _, n := range documented {
		if n == "OTEL_*" {
			continue
		}
		if suffix, ok := strings.CutPrefix(n, "PSP_<NAME>_"); ok {
			require.True(t, read[suffix], "%s lists %s, which no binary reads", envDocPath, n)
			continue
		}
		require.True(t, read[n], "%s lists %s, which no binary reads", envDocPath, n)
	}
	for _, n := range contractVariables {
		require.True(t, read[n], "the contract names %s, which no binary reads", n)
		require.Contains(t, documented, n, "the contract names %s, which %s does not list", n, envDocPath)
	}
}
