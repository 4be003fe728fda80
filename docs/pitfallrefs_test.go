package docs_test

import (
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pitfallHeading is an entry of pitfalls.md: "## 26. One body, read two ways".
var pitfallHeading = regexp.MustCompile(`(?m)^## (\d+[a-z]?)\. (.+)$`)

// pitfallEntry is one entry: its title and its heading's anchor.
type pitfallEntry struct{ title, anchor string }

func pitfallEntries(t *testing.T) map[string]pitfallEntry {
	t.Helper()
	out := map[string]pitfallEntry{}
	for _, m := range pitfallHeading.FindAllStringSubmatch(readDoc(t, "pitfalls.md"), -1) {
		out[m[1]] = pitfallEntry{title: m[2], anchor: slugify(m[1] + ". " + m[2])}
	}
	require.Greater(t, len(out), 10)
	return out
}

var (
	// anyPitfallRef is every mention of a pitfall by number, across line
	// breaks: "pitfall 51", "pitfalls 3".
	anyPitfallRef = regexp.MustCompile(`(?i)\bpitfalls?\s+#?(\d+[a-z]?)\b`)
	// pitfallLink is the form a doc refers by:
	// [pitfall 51](pitfalls.md#51-a-round-trip-per-statement).
	pitfallLink = regexp.MustCompile(`\[(?i:pitfall)\s+(\d+[a-z]?)\]\(((?:[./]*docs/|\.\./docs/|)?(?:pitfalls\.md)?#([^)\s]+))\)`)
	// pitfallCite is the form a code comment refers by, with the entry's
	// title: pitfall 26 "One body, read two ways" (a comment's line breaks
	// and markers between the words allowed).
	pitfallCite = regexp.MustCompile(`(?i)\bpitfall\s+(\d+[a-z]?)\s+"([^"]+)"`)
	// bareEntryRef is pitfalls.md's old shorthand, "(52)".
	bareEntryRef = regexp.MustCompile(`\((\d{1,2})\)`)
)

// Every reference to a pitfall by number, in the docs and in code
// comments, names the entry it points at: in markdown as a link to the
// entry's heading, whose anchor carries its number and title; in a comment
// with the entry's title in quotes. So a reference to the wrong entry, or
// to an entry renumbered since, fails here rather than misleading a reader.
func TestPitfallReferencesNameTheirEntry(t *testing.T) {
	t.Parallel()
	entries := pitfallEntries(t)
	refs := 0

	// Markdown: every mention is a link, and the link's anchor is the
	// entry's of that number.
	for _, f := range prose(t) {
		text := stripFences(readFile(t, f))
		for _, m := range pitfallLink.FindAllStringSubmatch(text, -1) {
			e, ok := entries[m[1]]
			require.True(t, ok, "%s: %s: pitfalls.md has no entry %s", f, m[0], m[1])
			require.Equal(t, e.anchor, m[3], "%s: %s points at another entry than %s. %s", f, m[0], m[1], e.title)
			refs++
		}
		rest := pitfallLink.ReplaceAllString(text, "")
		for _, m := range anyPitfallRef.FindAllString(rest, -1) {
			require.Failf(t, "a pitfall named by number alone", "%s: %q: link it to its entry, [pitfall N](pitfalls.md#N-title)", f, m)
		}
		if filepath.Base(f) == "pitfalls.md" {
			for _, m := range bareEntryRef.FindAllString(rest, -1) {
				require.Failf(t, "a pitfall named by number alone", "pitfalls.md: %q: link it to its entry", m)
			}
		}
	}

	// Code comments (and SQL, YAML, the Makefile): the number, then the
	// title in quotes.
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && path != repoRoot) {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".sql", ".yaml", ".yml", ".sh":
		default:
			if filepath.Base(path) != "Makefile" {
				return nil
			}
		}
		if strings.HasSuffix(path, "_test.go") && filepath.Base(filepath.Dir(path)) == "docs" {
			return nil // these tests, which spell the forms out
		}
		text := commentJoined(readFile(t, path))
		for _, m := range pitfallCite.FindAllStringSubmatch(text, -1) {
			e, ok := entries[m[1]]
			require.True(t, ok, "%s: %s: pitfalls.md has no entry %s", path, m[0], m[1])
			require.Equal(t, e.title, m[2], "%s: %s: entry %s is %q", path, m[0], m[1], e.title)
			refs++
		}
		for _, m := range anyPitfallRef.FindAllString(pitfallCite.ReplaceAllString(text, ""), -1) {
			require.Failf(t, "a pitfall named by number alone", "%s: %q: name its entry, pitfall N \"Title\"", path, m)
		}
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, refs, 8, "too few references found: do the patterns still match?")
}

// commentJoined joins comment lines so that a reference broken across
// them reads as one: the line break and the next line's comment marker
// become a space.
func commentJoined(text string) string {
	return regexp.MustCompile(`\n\s*(?://|--|#)\s*`).ReplaceAllString(text, " ")
}

// stripFences removes fenced code blocks, whose text is shell or SQL.
func stripFences(text string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// The check refuses each form it should.
func TestPitfallReferenceFormsAreTold(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"pitfall 51", "pitfall\n53", "Pitfalls 3"},
		anyPitfallRef.FindAllString("see pitfall 51, pitfall\n53 and Pitfalls 3", -1))
	m := pitfallLink.FindStringSubmatch("([pitfall 51](pitfalls.md#51-a-round-trip-per-statement))")
	require.Equal(t, []string{"51", "51-a-round-trip-per-statement"}, []string{m[1], m[3]})
	m = pitfallLink.FindStringSubmatch("see [pitfall 11](#11-duplicates-across-a-partition-boundary)")
	require.Equal(t, "11", m[1])
	c := pitfallCite.FindStringSubmatch(commentJoined("// (pitfall 26 \"One body, read two\n// ways\"): a raw"))
	require.Equal(t, []string{"26", "One body, read two ways"}, c[1:])
}

// tenSection is the heading of pitfalls.md's first section, which names
// the pitfalls that define the pattern rather than being one.
const tenSection = "The ten that define the pattern"

// pitfalls.md starts with the ten that define the pattern: ten links to
// ten different entries, each with its reason.
func TestTheTenThatDefineThePattern(t *testing.T) {
	t.Parallel()
	text := readDoc(t, "pitfalls.md")
	first := pitfallHeading.FindStringIndex(text)
	require.NotNil(t, first)
	_, section, ok := strings.Cut(text[:first[0]], "\n## "+tenSection+"\n")
	require.True(t, ok, "pitfalls.md does not start with ## %s", tenSection)
	entries := pitfallEntries(t)
	item := regexp.MustCompile(`(?m)^- \[(\d+[a-z]?)\. [^]]+\]\(#([^)]+)\):\s+\S`)
	seen := map[string]bool{}
	for _, m := range item.FindAllStringSubmatch(section, -1) {
		e, ok := entries[m[1]]
		require.True(t, ok, "the ten name entry %s, which does not exist", m[1])
		require.Equal(t, e.anchor, m[2], "the ten's item %s links another entry", m[1])
		seen[m[1]] = true
	}
	require.Len(t, seen, 10, "the ten name %d different entries", len(seen))
}
