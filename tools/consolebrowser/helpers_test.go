package consolebrowser_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	code := m.Run()
	closeBrowser()
	os.Exit(code)
}

// text reads the text of the first node sel matches, in one evaluation:
// a live page replaces its live region while it is read, so a node found
// in one call may be gone in the next.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`(document.querySelector(`+strconv.Quote(sel)+`) || {textContent: "(no such node)"}).textContent`))
	require.NoError(t, err, "text of %s", sel)
	return strings.TrimSpace(s)
}
