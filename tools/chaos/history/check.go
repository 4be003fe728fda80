package history

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdicts of a check.
const (
	Accepted = "accepted"
	Rejected = "rejected"
	// Undecided: no key was rejected, but Porcupine ran out of time on
	// some.
	Undecided = "undecided"
)

// Verdict is what the checker found in a history, and the PSPs' books.
type Verdict struct {
	Verdict string `json:"verdict"`
	// Operations is every request recorded; Checked those with an
	// Idempotency-Key, in Partitions keys (tenant and key), of which
	// Rejected are not linearizable and Undecided ran out of time.
	// Lost is the checked requests without an answer, Unsent those of them
	// that never reached a server (the connection was refused).
	Operations int `json:"operations"`
	Checked    int `json:"idempotent_operations"`
	Lost       int `json:"operations_without_answer"`
	Unsent     int `json:"operations_never_sent"` // of Lost: no connection made
	Partitions int `json:"partitions"`
	Rejected   int `json:"rejected_partitions"`
	Undecided  int `json:"undecided_partitions"`
	// RejectedKeys names the first rejected keys ("tenant/key").
	RejectedKeys []string `json:"rejected_keys,omitempty"`
	// CheckTime is the time Porcupine took over every key; MaxOps the
	// largest key's operations.
	CheckTime string `json:"check_time"`
	MaxOps    int    `json:"max_operations_per_key"`
	// File and Visualization name the history written beside the summary
	// and Porcupine's drawing of the rejected keys (empty when none).
	File          string `json:"file,omitempty"`
	Visualization string `json:"visualization,omitempty"`
	// Books: the PSPs' authorizations per charge (books.go).
	Books *Books `json:"psp_books,omitempty"`
}

// rejectedKeysShown bounds RejectedKeys and the keys drawn.
const rejectedKeysShown = 50

// Check checks every key of ops for linearizability against the model, each
// within timeout (0: none), and returns the verdict and, when keys were
// rejected, a function that draws them (Porcupine's HTML visualization).
func Check(ops []Op, timeout time.Duration) (*Verdict, func(io.Writer) error) {
	v := &Verdict{Operations: len(ops)}
	parts := partition(ops)
	v.Partitions = len(parts)
	var rejected [][]porcupine.Operation
	start := time.Now()
	for _, p := range parts {
		v.Checked += len(p.ops)
		v.MaxOps = max(v.MaxOps, len(p.ops))
		for _, o := range p.ops {
			if out := o.Output.(output); out.lost {
				v.Lost++
				if out.class == classRefused {
					v.Unsent++
				}
			}
		}
		switch porcupine.CheckOperationsTimeout(model, p.ops, timeout) {
		case porcupine.Illegal:
			v.Rejected++
			if len(rejected) < rejectedKeysShown {
				rejected = append(rejected, p.ops)
				v.RejectedKeys = append(v.RejectedKeys, p.name)
			}
		case porcupine.Unknown:
			v.Undecided++
		}
	}
	v.CheckTime = time.Since(start).Truncate(time.Microsecond).String()
	switch {
	case v.Rejected > 0:
		v.Verdict = Rejected
	case v.Undecided > 0:
		v.Verdict = Undecided
	default:
		v.Verdict = Accepted
	}
	if len(rejected) == 0 {
		return v, nil
	}
	return v, func(w io.Writer) error { return visualize(rejected, timeout, w) }
}

// visualize draws the rejected keys: their histories, the longest
// linearizations Porcupine found, and where each one failed.
func visualize(parts [][]porcupine.Operation, timeout time.Duration, w io.Writer) error {
	var all []porcupine.Operation
	for _, p := range parts {
		all = append(all, p...)
	}
	m := model
	m.Partition = func([]porcupine.Operation) [][]porcupine.Operation { return parts }
	_, info := porcupine.CheckOperationsVerbose(m, all, timeout)
	if err := porcupine.Visualize(m, info, w); err != nil {
		return fmt.Errorf("draw the rejected histories: %w", err)
	}
	return nil
}

// keyOps is one key's operations, ready for Porcupine.
type keyOps struct {
	name string
	ops  []porcupine.Operation
}

// partition groups the operations that carry an Idempotency-Key by tenant
// and key, in order of each key's first invocation. An operation without
// an answer returns after everything else of its key: its effect may come
// at any point after its invocation, or never. Within a key, each
// operation gets the first client row free at its invocation, so that the
// drawing shows concurrent requests side by side.
func partition(ops []Op) []keyOps {
	index := map[[2]string]int{}
	var byKey [][]*Op
	var names []string
	for i := range ops {
		op := &ops[i]
		if op.Key == "" {
			continue
		}
		k := [2]string{op.Tenant, op.Key}
		n, ok := index[k]
		if !ok {
			n = len(byKey)
			index[k] = n
			byKey = append(byKey, nil)
			names = append(names, op.Tenant+"/"+op.Key)
		}
		byKey[n] = append(byKey[n], op)
	}
	parts := make([]keyOps, len(byKey))
	for n, key := range byKey {
		slices.SortStableFunc(key, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })
		var end int64
		for _, op := range key {
			end = max(end, op.Call, op.Return)
		}
		end++
		parts[n].name = names[n]
		var rows []int64 // each row's last return
		for _, op := range key {
			ret := op.Return
			if !op.Answered() {
				ret = end
			}
			row := slices.IndexFunc(rows, func(last int64) bool { return last < op.Call })
			if row < 0 {
				row = len(rows)
				rows = append(rows, 0)
			}
			rows[row] = ret
			parts[n].ops = append(parts[n].ops, porcupine.Operation{ClientId: row, Input: inputOf(op), Call: op.Call,
				Output: outputOf(op), Return: ret, Metadata: fmt.Sprintf("op %d, tenant %s, key %s", op.ID, op.Tenant, op.Key)})
		}
	}
	return parts
}
