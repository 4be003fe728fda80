package deploy_test

// Structural checks of the observability configuration in deploy/.
//
// Neither promtool (Prometheus) nor otelcol-contrib (the OpenTelemetry
// Collector) is part of the project's machine setup or CI, so what runs
// everywhere are these structural checks: every YAML and JSON file parses,
// the alert rules carry the fields an on-call needs, every metric and phasepay_* label
// named in PromQL (dashboard and rules) is one the processes expose, every
// dashboard panel uses the DS_PROMETHEUS datasource variable, and the
// collector pipelines reference only defined components. When promtool or
// otelcol-contrib is on PATH, TestPromtool / TestOtelcolValidate run them too;
// otherwise those two tests are skipped.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	collectorFile  = "otel-collector.yaml"
	prometheusFile = "prometheus/prometheus.yml"
	alertsFile     = "prometheus/alerts.yaml"
	dashboardFile  = "grafana/phasepay-dashboard.json"
	grafanaDSFile  = "grafana/provisioning/datasources/prometheus.yaml"
	grafanaDBFile  = "grafana/provisioning/dashboards/phasepay.yaml"
	dsVariable     = "${DS_PROMETHEUS}"
	runbookDocPath = "docs/operations.md#"
)

// ---------------------------------------------------------------------------
// What the processes expose on /metrics (Prometheus names, as produced by the
// OpenTelemetry Prometheus exporter). Keep in step with internal/charges and
// internal/reaper: a name used in PromQL that is not here fails the tests.

type metricKind int

const (
	counter metricKind = iota
	gauge
	histogram // exposed as <name>_bucket, <name>_sum, <name>_count
)

type knownMetric struct {
	kind metricKind
	// labels maps each label of the metric to its possible values; a nil
	// value list means "any value". openLabels means the metric carries
	// labels not listed here (instrumentation libraries), so unknown
	// non-phasepay labels are not an error.
	labels     map[string][]string
	openLabels bool
}

var knownMetrics = map[string]knownMetric{
	// bin/api
	"phasepay_idempotency_outcomes_total": {kind: counter, labels: map[string][]string{
		"phasepay_outcome": {"new", "replay", "in_progress", "mismatch", "takeover", "lease_lost"},
	}},
	"phasepay_phase_duration_seconds": {kind: histogram, labels: map[string][]string{
		"phasepay_phase":   {"charge_created", "psp_authorized", "done"},
		"phasepay_outcome": {"ok", "lease_lost", "error"},
	}},
	"phasepay_psp_duration_seconds": {kind: histogram, labels: map[string][]string{
		"phasepay_psp_result": {"authorized", "declined", "unavailable", "rejected", "error"},
	}},
	"http_server_request_duration_seconds": {kind: histogram, openLabels: true, labels: map[string][]string{
		"http_request_method": nil, "http_response_status_code": nil,
	}},
	"db_client_operation_duration_seconds": {kind: histogram, openLabels: true},
	// bin/reaper
	"phasepay_reaper_takeovers_total":   {kind: counter},
	"phasepay_reaper_completions_total": {kind: counter},
	"phasepay_reaper_failures_total":    {kind: counter},
	"phasepay_partitions_created_total": {kind: counter},
	"phasepay_partitions_dropped_total": {kind: counter},
	"phasepay_idempotency_stuck_keys":   {kind: gauge},
	"phasepay_idempotency_unfinished_keys": {kind: gauge, labels: map[string][]string{
		"phasepay_schedule": {"in_flight", "waiting", "overdue"},
	}},
	"phasepay_idempotency_needs_attention_keys": {kind: gauge},
	"phasepay_partitions_days_ahead":            {kind: gauge},
	// bin/reaper's webhook deliverer (internal/webhooks)
	"phasepay_webhooks_attempts_total": {kind: counter, labels: map[string][]string{
		"endpoint": nil, "ok": {"true", "false"},
	}},
	"phasepay_webhooks_failed_total":               {kind: counter, labels: map[string][]string{"endpoint": nil}},
	"phasepay_webhooks_attempt_duration_seconds":   {kind: histogram},
	"phasepay_webhooks_delivery_latency_seconds":   {kind: histogram},
	"phasepay_webhooks_backlog":                    {kind: gauge},
	"phasepay_webhooks_backlog_oldest_age_seconds": {kind: gauge},
	"phasepay_webhooks_delivery_due_delay_seconds": {kind: gauge},
}

// Labels every series has: added by the scrape (job, instance), by the
// exporter (otel_scope_*), and le on histogram buckets.
var commonLabels = []string{"job", "instance", "le", "otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}

// ---------------------------------------------------------------------------
// PromQL scanning: just enough to find metric names, label matchers and
// grouping labels. Not a parser; the expressions here are simple.

var (
	// Metric names this project's PromQL may use: the phasepay_ prefix as
	// the brief demands, plus the two instrumentation-library families.
	metricNameRe = regexp.MustCompile(`\b(?:phasepay|http_server|db_client)_[a-z_]+`)
	// metric{matchers}
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	// by (a, b), without (...), on (...), ignoring (...), group_left (...)
	groupingRe = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	bracesRe   = regexp.MustCompile(`\{[^}]*\}`)
	// rate(x[...]) and friends must not be applied to gauges.
	counterFuncRe = regexp.MustCompile(`\b(rate|irate|increase)\s*\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	simpleAltRe   = regexp.MustCompile(`^[a-z0-9_]+(\|[a-z0-9_]+)*$`)
)

// metricFamily maps an exposed series name to its known family: histogram
// series must carry a _bucket/_sum/_count suffix, counters and gauges none.
func metricFamily(name string) (string, knownMetric, bool) {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if fam, ok := strings.CutSuffix(name, suffix); ok {
			if m, ok := knownMetrics[fam]; ok && m.kind == histogram {
				return fam, m, true
			}
		}
	}
	if m, ok := knownMetrics[name]; ok && m.kind != histogram {
		return name, m, true
	}
	return "", knownMetric{}, false
}

// metricNames returns the metric identifiers an expression references,
// ignoring label names in matchers and grouping clauses.
func metricNames(expr string) []string {
	stripped := groupingRe.ReplaceAllString(expr, " ")
	stripped = bracesRe.ReplaceAllString(stripped, " ")
	names := metricNameRe.FindAllString(stripped, -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// reporter is the part of *testing.T that checkPromQL uses, so that the
// scanner's own test can record failures without failing.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// recorder is a reporter that keeps the errors.
type recorder struct{ errs []string }

func (*recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// checkPromQL reports (through t) every problem of one expression and returns
// the metric families it references.
func checkPromQL(t reporter, where, expr string) []string {
	t.Helper()
	if strings.TrimSpace(expr) == "" {
		t.Errorf("%s: empty expression", where)
		return nil
	}
	if strings.Count(expr, "(") != strings.Count(expr, ")") ||
		strings.Count(expr, "{") != strings.Count(expr, "}") ||
		strings.Count(expr, "[") != strings.Count(expr, "]") {
		t.Errorf("%s: unbalanced brackets in %q", where, expr)
	}

	var families []string
	used := map[string]knownMetric{}
	for _, name := range metricNames(expr) {
		fam, m, ok := metricFamily(name)
		if !ok {
			t.Errorf("%s: %q is not a metric the processes expose (typo? histogram without _bucket/_sum/_count?) in %q", where, name, expr)
			continue
		}
		families = append(families, fam)
		used[fam] = m
	}

	for _, sm := range selectorRe.FindAllStringSubmatch(expr, -1) {
		fam, m, ok := metricFamily(sm[1])
		if !ok {
			continue // already reported above, or a non-project metric
		}
		for _, raw := range splitMatchers(sm[2]) {
			mm := matcherRe.FindStringSubmatch(raw)
			if mm == nil {
				t.Errorf("%s: cannot read label matcher %q of %s", where, raw, sm[1])
				continue
			}
			label, op, value := mm[1], mm[2], mm[3]
			if slices.Contains(commonLabels, label) {
				continue
			}
			values, known := m.labels[label]
			if !known {
				if !m.openLabels || strings.HasPrefix(label, "phasepay_") {
					t.Errorf("%s: %s has no label %q", where, fam, label)
				}
				continue
			}
			if values == nil {
				continue
			}
			var candidates []string
			switch {
			case op == "=" || op == "!=":
				candidates = []string{value}
			case simpleAltRe.MatchString(value):
				candidates = strings.Split(value, "|")
			}
			for _, v := range candidates {
				if !slices.Contains(values, v) {
					t.Errorf("%s: %s{%s} has no value %q (known: %v)", where, fam, label, v, values)
				}
			}
		}
	}

	for _, g := range groupingRe.FindAllStringSubmatch(expr, -1) {
		for _, label := range strings.Split(g[2], ",") {
			label = strings.TrimSpace(label)
			if label == "" || slices.Contains(commonLabels, label) {
				continue
			}
			found, open := false, false
			for _, m := range used {
				_, has := m.labels[label]
				found = found || has
				open = open || m.openLabels
			}
			if !found && (!open || strings.HasPrefix(label, "phasepay_")) {
				t.Errorf("%s: %s (%s) names a label none of its metrics has", where, g[1], label)
			}
		}
	}

	for _, cf := range counterFuncRe.FindAllStringSubmatch(expr, -1) {
		if _, m, ok := metricFamily(cf[2]); ok && m.kind == gauge {
			t.Errorf("%s: %s() over the gauge %s", where, cf[1], cf[2])
		}
	}
	return families
}

func splitMatchers(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(s):
			cur.WriteByte(c)
			i++
			cur.WriteByte(s[i])
			continue
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			if strings.TrimSpace(cur.String()) != "" {
				out = append(out, cur.String())
			}
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}

func TestPromQLScanner(t *testing.T) {
	// The checker itself: a typo must be caught, label names must not be
	// mistaken for metrics.
	assert.Equal(t, []string{"phasepay_phase_duration_seconds_bucket"},
		metricNames(`histogram_quantile(0.99, sum by (le, phasepay_phase) (rate(phasepay_phase_duration_seconds_bucket{phasepay_outcome="ok"}[5m])))`))

	for _, bad := range []string{
		`max(phasepay_idempotency_stuck_key)`,                                              // typo
		`rate(phasepay_phase_duration_seconds[5m])`,                                        // histogram family without suffix
		`sum(rate(phasepay_idempotency_outcomes_total{phasepay_outcome="lease_los"}[5m]))`, // label value
		`sum(rate(phasepay_idempotency_outcomes_total{phasepay_phase="done"}[5m]))`,        // label of another metric
		`sum by (phasepay_result) (rate(phasepay_psp_duration_seconds_count[5m]))`,         // grouping label
		`rate(phasepay_idempotency_stuck_keys[5m])`,                                        // rate of a gauge
		`sum(rate(phasepay_idempotency_outcomes_total[5m])`,                                // unbalanced
	} {
		var rec recorder
		checkPromQL(&rec, "scanner test", bad)
		assert.NotEmpty(t, rec.errs, "checker accepted %q", bad)
	}
	for _, good := range []string{
		`sum by (phasepay_outcome) (rate(phasepay_idempotency_outcomes_total{phasepay_outcome=~"replay|in_progress"}[5m]))`,
		`histogram_quantile(0.99, sum by (le, http_response_status_code) (rate(http_server_request_duration_seconds_bucket{job="phasepay-api"}[5m])))`,
		`absent(phasepay_partitions_days_ahead)`,
	} {
		var rec recorder
		checkPromQL(&rec, "scanner test", good)
		assert.Empty(t, rec.errs, "checker rejected %q", good)
	}
}

// ---------------------------------------------------------------------------
// Every file parses.

func TestEveryFileParses(t *testing.T) {
	var yamlFiles, jsonFiles int
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml":
			yamlFiles++
			dec := yaml.NewDecoder(bytes.NewReader(data))
			docs := 0
			for {
				var v any
				err := dec.Decode(&v)
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err, "%s", path)
				docs++
			}
			assert.Positive(t, docs, "%s: no YAML document", path)
			assert.NotContains(t, string(data), "\t", "%s: tab in YAML", path)
		case ".json":
			jsonFiles++
			var v any
			assert.NoError(t, json.Unmarshal(data, &v), "%s", path)
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, yamlFiles, 5, "YAML files under deploy/")
	assert.GreaterOrEqual(t, jsonFiles, 1, "JSON files under deploy/")
}

func decodeYAMLStrict(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(v), "%s", path)
}

func decodeYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, yaml.Unmarshal(data, &v), "%s", path)
	return v
}

// ---------------------------------------------------------------------------
// Alert rules.

type ruleFile struct {
	Groups []struct {
		Name     string `yaml:"name"`
		Interval string `yaml:"interval"`
		Limit    int    `yaml:"limit"`
		Rules    []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

var promDurationRe = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

func TestAlertRules(t *testing.T) {
	var rf ruleFile
	decodeYAMLStrict(t, alertsFile, &rf)
	require.NotEmpty(t, rf.Groups)

	alerts := map[string]rule{}
	for _, g := range rf.Groups {
		require.NotEmpty(t, g.Name, "group without name")
		require.NotEmpty(t, g.Rules, "group %s has no rules", g.Name)
		for i, r := range g.Rules {
			if r.Record != "" {
				assert.Empty(t, r.Alert, "rule %d of %s is both record and alert", i, g.Name)
				checkPromQL(t, "record "+r.Record, r.Expr)
				continue
			}
			where := "alert " + r.Alert
			if !assert.NotEmpty(t, r.Alert, "rule %d of group %s has neither alert nor record", i, g.Name) {
				continue
			}
			assert.NotContains(t, alerts, r.Alert, "duplicate alert name")
			alerts[r.Alert] = r
			assert.NotEmpty(t, r.Expr, where+": expr")
			assert.Regexp(t, promDurationRe, r.For, where+": for")
			assert.Contains(t, []string{"page", "warning", "info"}, r.Labels["severity"], where+": labels.severity")
			assert.NotEmpty(t, strings.TrimSpace(r.Annotations["summary"]), where+": annotations.summary")
			assert.Contains(t, r.Annotations["runbook_url"], runbookDocPath, where+": annotations.runbook_url")
			checkPromQL(t, where, r.Expr)
		}
	}

	want := []struct {
		name, severity, forDur, metric, runbook string
	}{
		{"PhasepayStuckKeys", "page", "5m", "phasepay_idempotency_stuck_keys", "stuck-keys"},
		{"PhasepayNeedsAttention", "page", "", "phasepay_idempotency_needs_attention_keys", "a-request-needs-attention"},
		{"PhasepayRequestsWaitingForPSP", "warning", "", `phasepay_idempotency_unfinished_keys{phasepay_schedule="waiting"}`, "psp-outage"},
		{"PhasepayPartitionsNotAhead", "page", "10m", "phasepay_partitions_days_ahead", "partition-not-created-ahead"},
		{"PhasepayReaperAbsent", "", "10m", "phasepay_partitions_days_ahead", "reaper-absent"},
		{"PhasepayPSPFailing", "warning", "5m", "phasepay_psp_duration_seconds_count", "psp-outage"},
		{"PhasepayLeaseLost", "warning", "", "phasepay_idempotency_outcomes_total", "lease-lost"},
		{"PhasepayWebhookBacklog", "warning", "5m", "phasepay_webhooks_delivery_due_delay_seconds", "webhook-backlog"},
	}
	for _, w := range want {
		r, ok := alerts[w.name]
		if !assert.True(t, ok, "alert %s missing", w.name) {
			continue
		}
		assert.Contains(t, r.Expr, w.metric, w.name)
		if w.severity != "" {
			assert.Equal(t, w.severity, r.Labels["severity"], w.name)
		}
		if w.forDur != "" {
			assert.Equal(t, w.forDur, r.For, w.name)
		}
		if w.runbook != "" {
			assert.True(t, strings.HasSuffix(r.Annotations["runbook_url"], runbookDocPath+w.runbook),
				"%s: runbook_url %q should end in %s%s", w.name, r.Annotations["runbook_url"], runbookDocPath, w.runbook)
		}
	}
	assert.Regexp(t, `max\(phasepay_idempotency_stuck_keys\)\s*>\s*0`, alerts["PhasepayStuckKeys"].Expr)
	assert.Regexp(t, `min\(phasepay_partitions_days_ahead\)\s*<\s*2`, alerts["PhasepayPartitionsNotAhead"].Expr)
	assert.Contains(t, alerts["PhasepayReaperAbsent"].Expr, "absent(phasepay_partitions_days_ahead)")
	assert.Contains(t, alerts["PhasepayPSPFailing"].Expr, `phasepay_psp_result="unavailable"`)
	assert.Contains(t, alerts["PhasepayLeaseLost"].Expr, `phasepay_outcome="lease_lost"`)
}

// ---------------------------------------------------------------------------
// Prometheus config.

func TestPrometheusConfig(t *testing.T) {
	cfg := decodeYAML(t, prometheusFile)

	ruleFiles, _ := cfg["rule_files"].([]any)
	require.NotEmpty(t, ruleFiles, "rule_files")
	var sawAlerts bool
	for _, rf := range ruleFiles {
		name, _ := rf.(string)
		// Prometheus resolves rule_files relative to the config file.
		_, err := os.Stat(filepath.Join(filepath.Dir(prometheusFile), name))
		require.NoError(t, err, "rule file %q", name)
		sawAlerts = sawAlerts || filepath.Base(name) == "alerts.yaml"
	}
	assert.True(t, sawAlerts, "rule_files must load alerts.yaml")

	targets := scrapeTargets(t, cfg)
	for _, want := range []string{"api-1:9092", "api-2:9092", "reaper-1:9091", "reaper-2:9091", "otel-collector:8888"} {
		assert.Contains(t, targets, want, "prometheus.yml scrape targets")
	}
}

// scrapeTargets returns job name -> targets of a Prometheus-style config
// (prometheus.yml, or the collector's prometheus receiver config), and checks
// that job names are unique.
func scrapeTargets(t *testing.T, cfg map[string]any) map[string]string {
	t.Helper()
	out := map[string]string{} // target -> job
	jobs := map[string]bool{}
	scs, _ := cfg["scrape_configs"].([]any)
	require.NotEmpty(t, scs, "scrape_configs")
	for _, sc := range scs {
		m, _ := sc.(map[string]any)
		job, _ := m["job_name"].(string)
		require.NotEmpty(t, job, "scrape config without job_name")
		assert.False(t, jobs[job], "duplicate job_name %s", job)
		jobs[job] = true
		statics, _ := m["static_configs"].([]any)
		for _, s := range statics {
			sm, _ := s.(map[string]any)
			ts, _ := sm["targets"].([]any)
			for _, tg := range ts {
				tgs, _ := tg.(string)
				assert.Regexp(t, `^[a-zA-Z0-9.\-]+:[0-9]+$`, tgs, "job %s target", job)
				out[tgs] = job
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Collector config.

type collectorConfig struct {
	Receivers  map[string]any `yaml:"receivers"`
	Processors map[string]any `yaml:"processors"`
	Exporters  map[string]any `yaml:"exporters"`
	Extensions map[string]any `yaml:"extensions"`
	Connectors map[string]any `yaml:"connectors"`
	Service    struct {
		Extensions []string `yaml:"extensions"`
		Pipelines  map[string]struct {
			Receivers  []string `yaml:"receivers"`
			Processors []string `yaml:"processors"`
			Exporters  []string `yaml:"exporters"`
		} `yaml:"pipelines"`
		Telemetry map[string]any `yaml:"telemetry"`
	} `yaml:"service"`
}

var componentIDRe = regexp.MustCompile(`^[a-z][a-z0-9_]*(/[^/\s]+)?$`)

func TestCollectorConfig(t *testing.T) {
	var cfg collectorConfig
	decodeYAMLStrict(t, collectorFile, &cfg)

	for section, defined := range map[string]map[string]any{
		"receivers": cfg.Receivers, "processors": cfg.Processors, "exporters": cfg.Exporters,
		"extensions": cfg.Extensions, "connectors": cfg.Connectors,
	} {
		for id := range defined {
			assert.Regexp(t, componentIDRe, id, "%s id", section)
		}
	}
	for _, ext := range cfg.Service.Extensions {
		assert.Contains(t, cfg.Extensions, ext, "service.extensions names an undefined extension")
	}

	kinds := map[string]bool{}
	for name, p := range cfg.Service.Pipelines {
		kind, _, _ := strings.Cut(name, "/")
		assert.Contains(t, []string{"traces", "metrics", "logs"}, kind, "pipeline %s", name)
		kinds[kind] = true

		assert.NotEmpty(t, p.Receivers, "pipeline %s: receivers", name)
		assert.NotEmpty(t, p.Exporters, "pipeline %s: exporters", name)
		for _, id := range p.Receivers {
			assert.True(t, has(cfg.Receivers, id) || has(cfg.Connectors, id), "pipeline %s: receiver %q is not defined", name, id)
		}
		for _, id := range p.Processors {
			assert.True(t, has(cfg.Processors, id), "pipeline %s: processor %q is not defined", name, id)
		}
		for _, id := range p.Exporters {
			assert.True(t, has(cfg.Exporters, id) || has(cfg.Connectors, id), "pipeline %s: exporter %q is not defined", name, id)
		}
		for _, list := range [][]string{p.Receivers, p.Processors, p.Exporters} {
			seen := map[string]bool{}
			for _, id := range list {
				assert.False(t, seen[id], "pipeline %s lists %s twice", name, id)
				seen[id] = true
			}
		}
		// The collector's own guidance: memory_limiter first, batch present.
		if assert.NotEmpty(t, p.Processors, "pipeline %s: processors", name) {
			assert.Equal(t, "memory_limiter", p.Processors[0], "pipeline %s: memory_limiter must come first", name)
			assert.Contains(t, p.Processors, "batch", "pipeline %s", name)
		}
	}
	assert.True(t, kinds["traces"], "a traces pipeline")
	assert.True(t, kinds["metrics"], "a metrics pipeline")
	assert.Contains(t, cfg.Service.Pipelines["traces"].Receivers, "otlp")
	assert.Contains(t, cfg.Service.Pipelines["traces"].Exporters, "debug")
	assert.Contains(t, cfg.Service.Pipelines["metrics"].Receivers, "prometheus")
	assert.Contains(t, cfg.Service.Pipelines["metrics"].Exporters, "prometheus")

	// OTLP on the standard ports.
	assert.True(t, strings.HasSuffix(dig[string](cfg.Receivers, "otlp", "protocols", "grpc", "endpoint"), ":4317"), "otlp grpc on :4317")
	assert.True(t, strings.HasSuffix(dig[string](cfg.Receivers, "otlp", "protocols", "http", "endpoint"), ":4318"), "otlp http on :4318")
	// Prometheus exporter re-exposing on :8889.
	assert.True(t, strings.HasSuffix(dig[string](cfg.Exporters, "prometheus", "endpoint"), ":8889"), "prometheus exporter on :8889")

	// The collector scrapes the same API and reaper as prometheus.yml.
	scrape := dig[map[string]any](cfg.Receivers, "prometheus", "config")
	require.NotNil(t, scrape, "receivers.prometheus.config")
	targets := scrapeTargets(t, scrape)
	for _, want := range []string{"api-1:9092", "api-2:9092", "reaper-1:9091", "reaper-2:9091"} {
		assert.Contains(t, targets, want) // one per replica; METRICS_ADDR, not the API port
	}
	promTargets := scrapeTargets(t, decodeYAML(t, prometheusFile))
	for target := range targets {
		assert.Contains(t, promTargets, target, "collector scrapes %s but prometheus.yml does not", target)
	}
}

func has(m map[string]any, id string) bool {
	_, ok := m[id]
	return ok
}

// dig follows map keys and returns the value found there as T (zero if absent).
func dig[T any](m map[string]any, keys ...string) T {
	var zero T
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return zero
		}
		cur = mm[k]
	}
	v, _ := cur.(T)
	return v
}

// ---------------------------------------------------------------------------
// Grafana dashboard and provisioning.

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Datasource   *datasourceRef `json:"datasource"`
		Expr         string         `json:"expr"`
		RefID        string         `json:"refId"`
		LegendFormat string         `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Thresholds struct {
				Steps []struct {
					Color string   `json:"color"`
					Value *float64 `json:"value"`
				} `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Panels []panel `json:"panels"` // collapsed rows
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	return d
}

// allPanels flattens rows; row panels themselves (no queries) are left out.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, allPanels(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	assert.NotEmpty(t, d.Title)
	assert.NotEmpty(t, d.UID)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36)
	assert.LessOrEqual(t, d.SchemaVersion, 41)

	var dsVar bool
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" {
			dsVar = v.Type == "datasource" && v.Query == "prometheus"
		}
	}
	assert.True(t, dsVar, "templating needs a datasource variable DS_PROMETHEUS of query prometheus")

	panels := allPanels(d.Panels)
	require.NotEmpty(t, panels)
	ids := map[int]string{}
	referenced := map[string]bool{}
	var exprs []string
	for _, p := range panels {
		where := "panel " + p.Title
		assert.Positive(t, p.ID, where+": id")
		if other, dup := ids[p.ID]; dup {
			t.Errorf("%s: id %d already used by %q", where, p.ID, other)
		}
		ids[p.ID] = p.Title
		assert.NotEmpty(t, p.Title, "panel %d: title", p.ID)
		assert.Contains(t, []string{"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "text"}, p.Type, where)
		if assert.NotNil(t, p.Datasource, where+": datasource") {
			assert.Equal(t, dsVariable, p.Datasource.UID, where+": datasource uid")
			assert.Equal(t, "prometheus", p.Datasource.Type, where+": datasource type")
		}
		assert.True(t, p.GridPos.W > 0 && p.GridPos.H > 0 && p.GridPos.X >= 0 && p.GridPos.X+p.GridPos.W <= 24, where+": gridPos %+v", p.GridPos)
		if !assert.NotEmpty(t, p.Targets, where+": targets") {
			continue
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.RefID, where+": refId")
			assert.False(t, refs[tg.RefID], where+": duplicate refId %s", tg.RefID)
			refs[tg.RefID] = true
			if assert.NotNil(t, tg.Datasource, where+": target datasource") {
				assert.Equal(t, dsVariable, tg.Datasource.UID, where+": target datasource uid")
			}
			for _, fam := range checkPromQL(t, where, tg.Expr) {
				referenced[fam] = true
			}
			exprs = append(exprs, tg.Expr)
		}
	}

	// Every phasepay metric is plotted somewhere.
	var missing []string
	for name := range knownMetrics {
		if !referenced[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "metrics the dashboard does not plot")

	all := strings.Join(exprs, "\n")
	for _, q := range []string{"0.5", "0.99"} {
		assert.Regexp(t, `histogram_quantile\(`+regexp.QuoteMeta(q)+`, sum by \(le, phasepay_phase\) \(rate\(phasepay_phase_duration_seconds_bucket\[`, all, "p%s per phase", q)
		assert.Regexp(t, `histogram_quantile\(`+regexp.QuoteMeta(q)+`, sum by \(le[^)]*\) \(rate\(phasepay_psp_duration_seconds_bucket\[`, all, "PSP p%s", q)
	}
	assert.Contains(t, all, `sum by (phasepay_outcome) (rate(phasepay_idempotency_outcomes_total[`)
	assert.Contains(t, all, "http_server_request_duration_seconds_bucket")

	// Stuck keys: a stat and a timeseries, red from anything above 0.
	// Partitions days ahead: a stat, red below 2.
	kinds := map[string]bool{}
	for _, p := range panels {
		exprs := ""
		for _, tg := range p.Targets {
			exprs += tg.Expr
		}
		steps := p.FieldConfig.Defaults.Thresholds.Steps
		switch {
		case strings.Contains(exprs, "phasepay_idempotency_stuck_keys"):
			kinds["stuck/"+p.Type] = true
			if assert.Len(t, steps, 2, "panel %s thresholds", p.Title) {
				assert.Nil(t, steps[0].Value)
				assert.NotEqual(t, "red", steps[0].Color, "panel %s: 0 must not be red", p.Title)
				assert.Equal(t, "red", steps[1].Color, "panel %s", p.Title)
				if assert.NotNil(t, steps[1].Value) {
					assert.True(t, *steps[1].Value > 0 && *steps[1].Value <= 1, "panel %s: red from > 0 (integer gauge)", p.Title)
				}
			}
		case strings.Contains(exprs, "phasepay_partitions_days_ahead"):
			kinds["days/"+p.Type] = true
			if assert.GreaterOrEqual(t, len(steps), 2, "panel %s thresholds", p.Title) {
				assert.Equal(t, "red", steps[0].Color, "panel %s: base red", p.Title)
				if assert.NotNil(t, steps[1].Value) {
					assert.InDelta(t, 2.0, *steps[1].Value, 0, "panel %s: red below 2", p.Title)
				}
			}
		}
	}
	assert.True(t, kinds["stuck/stat"], "stuck keys stat panel")
	assert.True(t, kinds["stuck/timeseries"], "stuck keys timeseries panel")
	assert.True(t, kinds["days/stat"], "partitions days ahead stat panel")
}

func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name      string         `yaml:"name"`
			UID       string         `yaml:"uid"`
			Type      string         `yaml:"type"`
			Access    string         `yaml:"access"`
			URL       string         `yaml:"url"`
			IsDefault bool           `yaml:"isDefault"`
			Editable  bool           `yaml:"editable"`
			JSONData  map[string]any `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	decodeYAMLStrict(t, grafanaDSFile, &ds)
	assert.Equal(t, 1, ds.APIVersion)
	require.Len(t, ds.Datasources, 1)
	assert.Equal(t, "prometheus", ds.Datasources[0].Type)
	assert.True(t, ds.Datasources[0].IsDefault, "the DS_PROMETHEUS variable falls back to the default datasource")
	assert.Regexp(t, `^https?://`, ds.Datasources[0].URL)

	var db struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name                  string `yaml:"name"`
			OrgID                 int    `yaml:"orgId"`
			Folder                string `yaml:"folder"`
			Type                  string `yaml:"type"`
			DisableDeletion       bool   `yaml:"disableDeletion"`
			AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
			UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `yaml:"path"`
				FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	decodeYAMLStrict(t, grafanaDBFile, &db)
	assert.Equal(t, 1, db.APIVersion)
	require.Len(t, db.Providers, 1)
	assert.Equal(t, "file", db.Providers[0].Type)
	assert.True(t, filepath.IsAbs(db.Providers[0].Options.Path), "provider path")
}

// ---------------------------------------------------------------------------
// The real validators, where installed (not on the project's machines).

func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed; the structural checks above are what runs here")
	}
	for _, args := range [][]string{
		{"check", "config", prometheusFile},
		{"check", "rules", alertsFile},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		assert.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

func TestOtelcolValidate(t *testing.T) {
	var bin string
	for _, name := range []string{"otelcol-contrib", "otelcol"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("otelcol-contrib not installed; the structural checks above are what runs here")
	}
	out, err := exec.Command(bin, "validate", "--config", collectorFile).CombinedOutput()
	assert.NoError(t, err, "%s validate:\n%s", bin, out)
}
