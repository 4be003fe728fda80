// Package consolebrowser holds the operator console's tests in a real
// browser: headless Chromium driven by chromedp, the pages as an operator
// sees them, and `make screenshots`, which renders every page into
// docs/console/. The console's other tests stay in internal/console; these
// live in the tools module so that the service's go.mod needs no browser
// driver. It has no code of its own.
package consolebrowser
