package docs_test

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	// pitfallHeading is an entry of pitfalls.md: one of the ten, "### 7. A
	// lost PSP response", or one of a group, "### H1. One body, read two
	// ways".
	pitfallHeading = regexp.MustCompile(`(?m)^### ([A-Z]?\d+)\. (.+)$`)
	// groupHeading is a group of entries: "## C. Claim and lease".
	groupHeading = regexp.MustCompile(`^## ([A-Z])\. (.+)$`)
	// groupRow is a group's row in the table at the top of pitfalls.md:
	// "| C | [Claim and lease](#c-claim-and-lease) | …".
	groupRow = regexp.MustCompile(`(?m)^\| ([A-Z]) \| \[([^\]]+)\]\(#([^)]+)\) \|`)
)

// tenSection and lastSection are the headings of pitfalls.md's first and
// last sections, which are not groups.
const (
	tenSection  = "The ten that define the pattern"
	lastSection = "All of it at once"
)

// pitfallEntry is one entry: its title and its heading's anchor.
type pitfallEntry struct{ title, anchor string }

func pitfallEntries(t *testing.T) map[string]pitfallEntry {
	t.Helper()
	out := map[string]pitfallEntry{}
	for _, m := range pitfallHeading.FindAllStringSubmatch(readDoc(t, "pitfalls.md"), -1) {
		require.NotContains(t, out, m[1], "pitfalls.md has two entries %s", m[1])
		out[m[1]] = pitfallEntry{title: m[2], anchor: slugify(m[1] + ". " + m[2])}
	}
	require.Greater(t, len(out), 10)
	return out
}

// pitfalls.md is the ten, numbered 1 to 10, then the groups, each under
// its letter with its entries numbered from 1, then "All of it at once".
// An entry numbered otherwise, or outside a group, fails here: that is
// how an entry added in the old form ("## 125. Title") is caught.
func TestPitfallsAreNumberedWithinTheirGroups(t *testing.T) {
	t.Parallel()
	text := readDoc(t, "pitfalls.md")
	var sections []string
	entries := map[string][]string{} // section → its entries' ids, in order
	section := ""
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		switch {
		case inFence:
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
			sections = append(sections, section)
		case strings.HasPrefix(line, "### "):
			m := pitfallHeading.FindStringSubmatch(line)
			require.NotNil(t, m, "pitfalls.md: %q: an entry's heading is ### <id>. <title>", line)
			entries[section] = append(entries[section], m[1])
		case strings.HasPrefix(line, "# ") && section == "" && len(entries) == 0:
			// the title
		case strings.HasPrefix(line, "#"):
			require.Failf(t, "a heading outside the scheme", "pitfalls.md: %q", line)
		}
	}
	require.GreaterOrEqual(t, len(sections), 3)
	require.Equal(t, tenSection, sections[0], "pitfalls.md starts with the ten")
	require.Equal(t, lastSection, sections[len(sections)-1], "pitfalls.md ends with %q", lastSection)

	want := func(prefix string, n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = prefix + strconv.Itoa(i+1)
		}
		return ids
	}
	require.Equal(t, want("", 10), entries[tenSection], "the ten are entries 1 to 10, in order")
	require.Empty(t, entries[lastSection], "%q holds no entry", lastSection)

	table := map[string]string{} // letter → the group's anchor, from the table at the top
	for _, m := range groupRow.FindAllStringSubmatch(text, -1) {
		table[m[1]] = m[3]
	}
	groups := 0
	for _, s := range sections[1 : len(sections)-1] {
		m := groupHeading.FindStringSubmatch("## " + s)
		require.NotNil(t, m, "pitfalls.md: ## %s: between the ten and %q, every section is a group, ## <letter>. <name>; an entry is ### <letter><n>. <title> under its group", s, lastSection)
		require.NotEmpty(t, entries[s], "group %s holds no entry", s)
		require.Equal(t, want(m[1], len(entries[s])), entries[s], "group %s: its entries are %s1, %s2, … in order", s, m[1], m[1])
		require.Equal(t, slugify(s), table[m[1]], "the table at the top of pitfalls.md links group %s", m[1])
		delete(table, m[1])
		groups++
	}
	require.Empty(t, table, "the table at the top of pitfalls.md names groups that do not exist")
	require.GreaterOrEqual(t, groups, 2)
}

var (
	// anyPitfallRef is every mention of a pitfall by id, across line
	// breaks, whatever its case or form: "pitfall Q1", "pitfalls 3",
	// "pitfall c3", "pitfall 87".
	anyPitfallRef = regexp.MustCompile(`(?i:\bpitfalls?)\s+#?([A-Za-z]?\d+[a-z]?)\b`)
	// pitfallLink is a markdown link to a heading of pitfalls.md, the form
	// a doc refers to an entry by: [pitfall Q1](pitfalls.md#q1-a-round-trip-per-statement).
	// Its groups are the label, the path (empty within pitfalls.md) and
	// the anchor.
	pitfallLink = regexp.MustCompile(`\[([^\[\]]+)\]\(((?:\.\./|\./)*(?:docs/)?pitfalls\.md|)#([^)\s]+)\)`)
	// entryAnchor is an anchor shaped like an entry's: "q1-…", "7-…".
	entryAnchor = regexp.MustCompile(`^[a-z]?\d+[a-z]?-`)
	// pitfallCite is the form a code comment refers by, with the entry's
	// title: pitfall H1 "One body, read two ways" (a comment's line breaks
	// and markers between the words allowed).
	pitfallCite = regexp.MustCompile(`(?i:\bpitfall)\s+([A-Za-z]?\d+[a-z]?)\s+"([^"]+)"`)
	// titleOnlyRef is an older form of a code comment's reference, by the
	// file and a title or a number: (docs/pitfalls.md, "A title").
	titleOnlyRef = regexp.MustCompile(`pitfalls\.md,\s*["\d]`)
	// bareEntryRef is pitfalls.md's old shorthand, "(52)" or "(C3)".
	bareEntryRef = regexp.MustCompile(`\(([A-Z]?\d{1,2})\)`)
)

// markdownRefProblems returns what is wrong with the references to
// pitfalls in a markdown file's text: a link to an entry must be labelled
// with its id ("pitfall C3", or "C3", or within pitfalls.md "C3. Its
// title"), a link to an entry-shaped anchor must find its entry, and no
// pitfall is named by its id without a link.
func markdownRefProblems(file, text string, entries map[string]pitfallEntry) []string {
	byAnchor := map[string]string{}
	for id, e := range entries {
		byAnchor[e.anchor] = id
	}
	self := filepath.Base(file) == "pitfalls.md"
	var out []string
	text = stripFencesAndSpans(text)
	rest := pitfallLink.ReplaceAllStringFunc(text, func(link string) string {
		m := pitfallLink.FindStringSubmatch(link)
		label, path, anchor := strings.Join(strings.Fields(m[1]), " "), m[2], m[3]
		if path == "" && !self {
			return link // a heading of the file itself
		}
		id, ok := byAnchor[anchor]
		if !ok {
			if entryAnchor.MatchString(anchor) {
				out = append(out, fmt.Sprintf("%s: %s: pitfalls.md has no entry #%s", file, link, anchor))
			}
			return ""
		}
		switch label {
		case "pitfall " + id, "Pitfall " + id, id:
		case id + ". " + entries[id].title:
			if self {
				break
			}
			fallthrough
		default:
			out = append(out, fmt.Sprintf("%s: %s: a link to entry %s is labelled [pitfall %s]", file, link, id, id))
		}
		return ""
	})
	for _, m := range anyPitfallRef.FindAllString(rest, -1) {
		out = append(out, fmt.Sprintf("%s: %q: a pitfall named by its id alone; link it to its entry, [pitfall C3](pitfalls.md#c3-its-title)", file, m))
	}
	if self {
		for _, m := range bareEntryRef.FindAllString(rest, -1) {
			out = append(out, fmt.Sprintf("%s: %q: a pitfall named by its id alone; link it to its entry", file, m))
		}
	}
	return out
}

// codeRefProblems returns what is wrong with the references to pitfalls
// in a file of code (its comments, SQL, YAML, the Makefile): each is the
// id, then the entry's title in quotes.
func codeRefProblems(file, text string, entries map[string]pitfallEntry) []string {
	var out []string
	text = commentJoined(text)
	for _, m := range pitfallCite.FindAllStringSubmatch(text, -1) {
		e, ok := entries[m[1]]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: %s: pitfalls.md has no entry %s", file, m[0], m[1]))
		case e.title != m[2]:
			out = append(out, fmt.Sprintf("%s: %s: entry %s is %q", file, m[0], m[1], e.title))
		}
	}
	for _, m := range anyPitfallRef.FindAllString(pitfallCite.ReplaceAllString(text, ""), -1) {
		out = append(out, fmt.Sprintf("%s: %q: name its entry, pitfall C3 \"Its title\"", file, m))
	}
	for _, m := range titleOnlyRef.FindAllString(text, -1) {
		out = append(out, fmt.Sprintf("%s: %q: cite the entry as pitfall C3 \"Its title\"", file, m))
	}
	return out
}

// Every reference to a pitfall by id, in the docs and in code comments,
// names the entry it points at: in markdown as a link to the entry's
// heading, whose anchor carries its id and title; in a comment with the
// entry's title in quotes. So a reference to the wrong entry, or to an
// entry renumbered or renamed since, fails here rather than misleading a
// reader.
func TestPitfallReferencesNameTheirEntry(t *testing.T) {
	t.Parallel()
	entries := pitfallEntries(t)
	refs := 0
	var problems []string

	for _, f := range prose(t) {
		text := readFile(t, f)
		refs += len(pitfallLink.FindAllString(stripFencesAndSpans(text), -1))
		problems = append(problems, markdownRefProblems(f, text, entries)...)
	}

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
		text := readFile(t, path)
		refs += len(pitfallCite.FindAllString(commentJoined(text), -1))
		problems = append(problems, codeRefProblems(path, text, entries)...)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, problems)
	require.GreaterOrEqual(t, refs, 40, "too few references found: do the patterns still match?")
}

// commentJoined joins comment lines so that a reference broken across
// them reads as one: the line break and the next line's comment marker
// become a space.
func commentJoined(text string) string {
	return regexp.MustCompile(`\n\s*(?://|--|#)\s*`).ReplaceAllString(text, " ")
}

// stripFencesAndSpans removes fenced code blocks and code spans, which
// show a form rather than use it. A code span may cross a line break but
// not a paragraph.
func stripFencesAndSpans(text string) string {
	paragraphs := strings.Split(stripFences(text), "\n\n")
	for i, p := range paragraphs {
		paragraphs[i] = stripCodeSpans(p)
	}
	return strings.Join(paragraphs, "\n\n")
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

// The checks find each reference they should, and refuse each wrong one:
// an entry that does not exist, one renamed, the old numbers, a label
// that names another entry, an id in lower case.
func TestPitfallReferenceFormsAreTold(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"pitfall Q1", "pitfall\n12", "Pitfalls 3", "pitfall c3"},
		anyPitfallRef.FindAllString("see pitfall Q1, pitfall\n12, Pitfalls 3 and pitfall c3", -1))
	m := pitfallLink.FindStringSubmatch("([pitfall Q1](pitfalls.md#q1-a-round-trip-per-statement))")
	require.Equal(t, []string{"pitfall Q1", "pitfalls.md", "q1-a-round-trip-per-statement"}, m[1:])
	m = pitfallLink.FindStringSubmatch("see [pitfall C2](#c2-duplicates-across-a-partition-boundary)")
	require.Equal(t, []string{"pitfall C2", "", "c2-duplicates-across-a-partition-boundary"}, m[1:])
	c := pitfallCite.FindStringSubmatch(commentJoined("// (pitfall H1 \"One body, read two\n// ways\"): a raw"))
	require.Equal(t, []string{"H1", "One body, read two ways"}, c[1:])

	entries := map[string]pitfallEntry{
		"7":  {title: "A lost PSP response", anchor: "7-a-lost-psp-response"},
		"Q1": {title: "A round trip per statement", anchor: "q1-a-round-trip-per-statement"},
	}
	for _, ok := range []string{
		"[pitfall Q1](pitfalls.md#q1-a-round-trip-per-statement)",
		"[Pitfall 7](../docs/pitfalls.md#7-a-lost-psp-response)",
		"([pitfall\n7](pitfalls.md#7-a-lost-psp-response), [Q1](pitfalls.md#q1-a-round-trip-per-statement))",
		"[the groups](pitfalls.md#c-claim-and-lease)",
		"the form is `pitfall C3 \"Its\ntitle\"`, or `[pitfall C3](pitfalls.md#c3-its-title)`",
	} {
		require.Empty(t, markdownRefProblems("api.md", ok, entries), ok)
	}
	for _, bad := range []string{
		"[pitfall Q2](pitfalls.md#q2-a-plan-per-execution)",
		"[pitfall 51](pitfalls.md#51-a-round-trip-per-statement)",
		"[pitfall Q1](pitfalls.md#q1-a-round-trip-per-query)",
		"[pitfall 7](pitfalls.md#q1-a-round-trip-per-statement)",
		"[pitfalls](pitfalls.md#q1-a-round-trip-per-statement)",
		"as pitfall Q1 says",
		"as pitfall 51 says",
		"[pitfall 7](#7-a-heading-of-this-file)",
	} {
		require.NotEmpty(t, markdownRefProblems("api.md", bad, entries), bad)
	}
	require.Empty(t, markdownRefProblems("pitfalls.md", "[7. A lost PSP\n  response](#7-a-lost-psp-response)", entries))
	require.NotEmpty(t, markdownRefProblems("pitfalls.md", "as (Q1) says", entries))

	for _, ok := range []string{
		"// (pitfall Q1 \"A round trip per\n// statement\")",
		"-- pitfall 7 \"A lost PSP response\"",
	} {
		require.Empty(t, codeRefProblems("x.go", ok, entries), ok)
	}
	for _, bad := range []string{
		"// pitfall Q2 \"A round trip per statement\"",
		"// pitfall 51 \"A round trip per statement\"",
		"// pitfall q1 \"A round trip per statement\"",
		"// pitfall Q1 \"A round trip per query\"",
		"// see pitfall Q1",
		"// (docs/pitfalls.md, \"A round trip per statement\")",
		"// (docs/pitfalls.md, 51)",
	} {
		require.NotEmpty(t, codeRefProblems("x.go", bad, entries), bad)
	}
}

// pitfalls.md starts with the ten that define the pattern: ten links to
// the entries 1 to 10, in order, each with its title and its reason.
func TestTheTenThatDefineThePattern(t *testing.T) {
	t.Parallel()
	text := readDoc(t, "pitfalls.md")
	first := pitfallHeading.FindStringIndex(text)
	require.NotNil(t, first)
	_, section, ok := strings.Cut(text[:first[0]], "\n## "+tenSection+"\n")
	require.True(t, ok, "pitfalls.md does not start with ## %s", tenSection)
	entries := pitfallEntries(t)
	item := regexp.MustCompile(`(?m)^- \[(\d+)\. ([^]]+)\]\(#([^)]+)\):\s+\S`)
	var ids []string
	for _, m := range item.FindAllStringSubmatch(section, -1) {
		e, ok := entries[m[1]]
		require.True(t, ok, "the ten name entry %s, which does not exist", m[1])
		require.Equal(t, e.anchor, m[3], "the ten's item %s links another entry", m[1])
		require.Equal(t, e.title, strings.Join(strings.Fields(m[2]), " "), "the ten's item %s", m[1])
		ids = append(ids, m[1])
	}
	require.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}, ids, "the ten are entries 1 to 10, in order")
}
