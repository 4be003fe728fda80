package checks

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// startsGoroutines matches what, in a test file, starts goroutines that can
// outlive a test: a goroutine of its own, a server, a pool, a throw-away
// cluster or pooler, a test world that holds them, a service's Start.
var startsGoroutines = regexp.MustCompile(`go func|\.Go\(func|httptest\.New|testdb\.|pgxpool\.New|pgcluster\.|pgbouncer\.|chargestest\.|consoletest\.|phasestest\.Setup|\.Start\(`)

// leakUnchecked returns the packages, of those whose test files are in
// files (a directory's file names and contents), that start goroutines in
// their tests and have no goleak.VerifyTestMain.
func leakUnchecked(files map[string]map[string]string) []string {
	var bad []string
	for dir, inDir := range files {
		starts, verifies := false, false
		for _, src := range inDir {
			starts = starts || startsGoroutines.MatchString(src)
			verifies = verifies || strings.Contains(src, "goleak.VerifyTestMain(")
		}
		if starts && !verifies {
			bad = append(bad, dir)
		}
	}
	slices.Sort(bad)
	return bad
}

// Every test package under internal/ and cmd/ that starts goroutines
// (servers, pools, listeners, reapers) checks with goleak, in its
// TestMain, that its tests leave none behind. A leaked goroutine fails
// nothing by itself: it holds a connection, or a port, or writes after
// its test has ended.
func TestGoroutineStartingTestsVerifyNoLeaks(t *testing.T) {
	t.Parallel()
	files := map[string]map[string]string{}
	serviceTestFiles(t, func(path string, src []byte) error {
		dir := filepath.Dir(path)
		if files[dir] == nil {
			files[dir] = map[string]string{}
		}
		files[dir][filepath.Base(path)] = string(src)
		return nil
	})
	require.Greater(t, len(files), 20, "the walk found too few test packages: is repoRoot right?")
	require.Empty(t, leakUnchecked(files), "test packages that start goroutines without goleak.VerifyTestMain in a TestMain")
}

// The check finds a package that starts a server without goleak, and
// passes one that verifies and one that starts nothing.
func TestLeakCheckFindsUncheckedPackages(t *testing.T) {
	t.Parallel()
	bad := leakUnchecked(map[string]map[string]string{
		"unchecked": {"a_test.go": `srv := httptest.NewServer(h)`},
		"checked": {
			"a_test.go":    `pool := testdb.New(t)`,
			"main_test.go": `func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }`,
		},
		"pure": {"a_test.go": `require.Equal(t, 2, 1+1)`},
	})
	require.Equal(t, []string{"unchecked"}, bad)
}

// serviceTestFiles calls fn with every test file of the service's Go code
// (internal/ and cmd/, testdata left out), and fails t on any error.
func serviceTestFiles(t *testing.T, fn func(path string, src []byte) error) {
	t.Helper()
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return fn(path, src)
		})
		require.NoError(t, err)
	}
}
