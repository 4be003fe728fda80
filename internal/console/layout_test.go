package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/console/plot"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/timeline"
)

const (
	apiHolder    = "api:vm:2894:66423e01"
	reaperHolder = "reaper:vm:2895:b2bf1272"
)

func entry(at time.Time, kind idempotency.Kind, holder string, f ...func(*timeline.Entry)) timeline.Entry {
	e := timeline.Entry{Entry: idempotency.Entry{At: at, Kind: kind, Holder: holder, LockVersion: 1}}
	for _, g := range f {
		g(&e)
	}
	return e
}

// A dead api's hold ends where it was last heard of, its last heartbeat,
// not where the reaper took its key over once its lease ran out; the rest
// of the hold is drawn apart (silent) and the heartbeat is labelled.
func TestDeadHoldersBarEndsAtItsLastHeartbeat(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tv := layoutTimeline([]timeline.Entry{
		entry(ms(0), idempotency.KindClaimed, apiHolder),
		entry(ms(0), idempotency.KindReached, apiHolder, func(e *timeline.Entry) { e.RecoveryPoint = "charge_created" }),
		entry(ms(400), idempotency.KindHeartbeat, apiHolder),
		entry(ms(2400), idempotency.KindTakenOver, reaperHolder, func(e *timeline.Entry) { e.By = "reaper"; e.LockVersion = 2 }),
		entry(ms(2450), idempotency.KindFinished, reaperHolder, func(e *timeline.Entry) { e.ResponseStatus = 201; e.LockVersion = 2 }),
	}, false, time.Time{})
	require.Len(t, tv.Lanes, 2)
	api := tv.Lanes[0]
	require.Len(t, api.Held, 2, "held while heard of, then silent")
	solid, silent := api.Held[0], api.Held[1]
	require.Equal(t, "held", solid.Class)
	require.Equal(t, "held silent", silent.Class)
	var beat *mark
	for i, m := range api.Marks {
		if strings.Contains(m.Class, "heartbeat") {
			beat = &api.Marks[i]
		}
	}
	require.NotNil(t, beat, "the heartbeat is marked")
	require.Equal(t, "last heartbeat", beat.Label)
	require.InDelta(t, beat.X, solid.X+solid.W, 0.01, "the solid bar ends at the last heartbeat")
	require.InDelta(t, beat.X, silent.X, 0.01)
	require.Contains(t, silent.Title, "until the reaper took it over")
	reaper := tv.Lanes[1]
	require.InDelta(t, silent.X+silent.W, reaper.Held[0].X, 0.01, "silent until the takeover")

	// A live holder that released its key was heard of to the end.
	tv = layoutTimeline([]timeline.Entry{
		entry(ms(0), idempotency.KindClaimed, apiHolder),
		entry(ms(400), idempotency.KindHeartbeat, apiHolder),
		entry(ms(900), idempotency.KindReleased, apiHolder),
	}, false, time.Time{})
	require.Len(t, tv.Lanes[0].Held, 1)
	for _, m := range tv.Lanes[0].Marks {
		require.NotEqual(t, "last heartbeat", m.Label)
	}
}

// Marks at one instant are one mark whose label says each, and no label
// is clipped at the drawing's edges or overlaps another of its row.
func TestTimelineLabelsStayInsideAndApart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	reached := func(p string) func(*timeline.Entry) {
		return func(e *timeline.Entry) { e.RecoveryPoint = idempotency.RecoveryPoint(p) }
	}
	es := []timeline.Entry{
		entry(ms(0), idempotency.KindClaimed, apiHolder),
		entry(ms(0), idempotency.KindReached, apiHolder, reached("charge_created")),
		entry(ms(1), idempotency.KindReached, apiHolder, reached("psp_authorized")),
	}
	for i := range 12 { // crowded, and up to the right edge
		es = append(es, entry(ms(1000+i*8), idempotency.KindReached, apiHolder, reached("a_rather_long_recovery_point")))
	}
	es = append(es, entry(ms(1100), idempotency.KindFinished, apiHolder, func(e *timeline.Entry) { e.ResponseStatus = 201 }))
	tv := layoutTimeline(es, false, time.Time{})
	l := tv.Lanes[0]
	require.Equal(t, 3, l.Marks[0].Count, "three entries at one instant, one mark")
	require.Equal(t, "claimed · charge_created · psp_authorized", l.Marks[0].Label)
	type span struct{ x0, x1 float64 }
	rows := map[float64][]span{}
	labelled := 0
	for _, m := range l.Marks {
		if m.Label == "" {
			continue
		}
		labelled++
		s := span{m.LabelX, m.LabelX + plot.TextWidth(m.Label, tlLabelSize)}
		require.GreaterOrEqual(t, s.x0, tlGutter, "%q starts inside the drawing", m.Label)
		require.LessOrEqual(t, s.x1, tlWidth, "%q is not clipped at the right edge", m.Label)
		for _, o := range rows[m.LabelY] {
			require.False(t, s.x0 < o.x1 && o.x0 < s.x1, "%q overlaps another label of its row", m.Label)
		}
		rows[m.LabelY] = append(rows[m.LabelY], s)
	}
	require.GreaterOrEqual(t, labelled, 3, "the first, a crowded one and the last are labelled")
	require.Contains(t, l.Marks[len(l.Marks)-1].Label, "finished 201", "the mark at the right edge keeps its label")
}
