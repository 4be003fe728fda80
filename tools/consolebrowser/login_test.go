package consolebrowser_test

import (
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/consoletest"
)

// TestLoginLocationsStayOnTheConsole: pitfall O9 "A login link that sends
// the operator to another site", in a browser. Every Location the login
// answered to a next= a link may carry, by GET and by the form's POST,
// resolved by a real browser's URL parser against the console, stays on
// the console.
func TestLoginLocationsStayOnTheConsole(t *testing.T) {
	t.Parallel()
	w := consoletest.NewWorld(t)
	var locations []string
	for _, next := range append(consoletest.NextKept, consoletest.NextRefused...) {
		for _, post := range []bool{false, true} {
			locations = append(locations, consoletest.LoginLocation(t, w.Base, next, post))
		}
	}

	browser := tab(t, w.Base)
	origins, err := chromedp.Run(browser, chromedp.Evaluate[[]string](
		`(`+jsonStrings(locations)+`).map(l => new URL(l, location.href).origin)`))
	require.NoError(t, err)
	require.Len(t, origins, len(locations))
	for i, o := range origins {
		require.Equal(t, w.Base, o, "Location %q", locations[i])
	}
}

// jsonStrings writes ss as a JavaScript array literal.
func jsonStrings(ss []string) string {
	b, _ := json.Marshal(ss) // strings always encode
	return string(b)
}
