package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/phasepay/phasepay/tools/chaos/history"
)

// The independent checker (tools/chaos/history): every request the
// run's clients sent, checked by Porcupine against a model of the
// idempotent API that knows nothing of phasepay's internals, and the PSPs'
// books read once at the end. Its verdict is in the summary; a rejection
// is a violation, as is a charge authorized at more than one PSP.

// historyTimeout bounds Porcupine's search on one key. A key has a few
// dozen requests at most, which it checks in microseconds; a key it cannot
// decide in this time is reported undecided, never accepted.
const historyTimeout = 30 * time.Second

// mismatchProbeEvery: every this many intents, once the intent has an
// end, one request of another endpoint is sent under its key, which must be
// refused 422 (the model checks it). It goes to /v1/refunds for a charge
// that does not exist, so that a key lost with a failover, which it would
// then take, moves no money.
const mismatchProbeEvery = 20

// probeMismatch sends the intent's key with another request, once.
func (h *harness) probeMismatch(ctx context.Context, it *intent) {
	if !it.probe || it.status == 0 {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://workers/v1/refunds",
		strings.NewReader(`{"charge":"ch_mismatchprobe"}`))
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+h.st.apiKey)
	req.Header.Set("Idempotency-Key", it.in.Key)
	req.Header.Set("Content-Type", "application/json")
	h.mismatchProbes.Add(1)
	resp, err := (&http.Client{Transport: h.rt, Timeout: 5 * time.Second}).Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// checkHistory checks the recorded history and the PSPs' books, writes the
// history (and, if it was rejected, Porcupine's drawing of the rejected
// keys) to Config.HistoryFile, and puts the verdict in the summary.
func (h *harness) checkHistory(ctx context.Context) error {
	v, draw := history.Check(h.history.Ops(), historyTimeout)
	books, err := history.ReadBooks(ctx, h.st.pspByName)
	if err != nil {
		return err
	}
	v.Books = books
	if path := h.cfg.HistoryFile; path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := history.WriteFile(path, h.history.Ops(), h.history.Bodies()); err != nil {
			return err
		}
		v.File = filepath.Base(path)
		if draw != nil {
			html := VisualizationPath(path)
			if err := writeWith(html, draw); err != nil {
				return err
			}
			v.Visualization = filepath.Base(html)
		}
	}
	h.sum.History = v
	h.sum.MismatchProbes = int(h.mismatchProbes.Load())
	if v.Verdict == history.Rejected {
		h.sum.Violations = append(h.sum.Violations, fmt.Sprintf("history: Porcupine rejected %d of %d keys (%d requests, %d without an answer); the first: %s",
			v.Rejected, v.Partitions, v.Checked, v.Lost, strings.Join(v.RejectedKeys[:min(5, len(v.RejectedKeys))], ", ")))
	}
	for _, over := range books.Over {
		h.sum.Violations = append(h.sum.Violations, "history: PSP books: charge "+over)
	}
	return nil
}

// HistoryPath is where a run whose summary goes to jsonPath writes its
// history: beside it, named after it ("" when jsonPath is).
func HistoryPath(jsonPath string) string {
	if jsonPath == "" {
		return ""
	}
	return strings.TrimSuffix(jsonPath, filepath.Ext(jsonPath)) + "-history.jsonl.gz"
}

// VisualizationPath is where Porcupine's drawing of a history file's
// rejected keys goes: beside it, named after it.
func VisualizationPath(historyFile string) string {
	return strings.TrimSuffix(strings.TrimSuffix(historyFile, ".gz"), ".jsonl") + ".html"
}

func writeWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// historyRows adds the checker's rows to the summary's table.
func (s *Summary) historyRows(row func(string, any)) {
	v := s.History
	if v == nil {
		return
	}
	row("client history (Porcupine)", v.Verdict)
	row("  requests recorded", v.Operations)
	row("  with a key / without an answer", fmt.Sprintf("%d / %d (%d never sent)", v.Checked, v.Lost, v.Unsent))
	row("  keys (partitions) / rejected", fmt.Sprintf("%d / %d", v.Partitions, v.Rejected))
	if v.Undecided > 0 {
		row("  keys undecided (time out)", v.Undecided)
	}
	row("  422 probes (another request)", s.MismatchProbes)
	row("  check time", v.CheckTime)
	if b := v.Books; b != nil {
		row("PSP books: authorizations/charge", fmt.Sprintf("max %d over %d charges", b.MaxPerCharge, b.Charges))
	}
}
