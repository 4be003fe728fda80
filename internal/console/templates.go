package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/console/plot"
)

// pageNames are the pages, each a template file of assets/templates that
// defines "content" (and "live", the part live updates replace) inside
// layout.html.
var pageNames = []string{"overview", "requests", "request", "charge", "webhooks", "webhook", "login", "error"}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"time":       fmtTime,
	"timeMS":     fmtTimeMS,
	"ago":        ago,
	"dur":        plot.Duration,
	"secs":       func(s float64) string { return plot.Duration(time.Duration(s * float64(time.Second))) },
	"rate":       func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"num":        plot.Number,
	"pretty":     prettyJSON,
	"redact":     redactURL,
	"requestURL": requestURL,
	"chargeURL":  chargeURL,
	"webhookURL": webhookURL,
	"derefTimeValue": func(t *time.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return *t
	},
	"deref":   func(s *string) string { return deref(s, "") },
	"derefOr": func(s *string, def string) string { return deref(s, def) },
	"derefTime": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return fmtTime(*t)
	},
	"join": strings.Join,
	"add":  func(a, b int) int { return a + b },
	"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
}

// fmtTime prints a time as the API does, in UTC, to the millisecond.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// fmtTimeMS prints a time of day to the microsecond, for timelines.
func fmtTimeMS(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + plot.Duration((-d).Round(time.Millisecond))
	}
	if d < time.Second {
		return "just now"
	}
	return plot.Duration(d.Round(time.Second)) + " ago"
}

func deref(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

// prettyJSON indents a stored answer's body when it is JSON, and prints
// it as text otherwise; html/template escapes it either way.
func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") == nil {
		return out.String()
	}
	return string(b)
}

// redactURL prints a registered URL without what may be a secret in it:
// its user information and its query (the contract keeps both out of
// logs, and the console is no different).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.User != nil {
		u.User = url.User("…")
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return u.String()
}

// requestURL is the console's page of one request.
func requestURL(tenant, key string) string {
	return "/request?" + url.Values{"tenant": {tenant}, "key": {key}}.Encode()
}

// chargeURL is the console's page of one charge.
func chargeURL(tenant, id string) string {
	return "/charge?" + url.Values{"tenant": {tenant}, "id": {id}}.Encode()
}

// webhookURL is the console's page of one webhook endpoint.
func webhookURL(tenant, id string) string {
	return "/webhook?" + url.Values{"tenant": {tenant}, "id": {id}}.Encode()
}
