package idempotency

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// unstamped is an Entry as encoding/json would write it for
// phasepay_timeline_append: at and lock_version null and first (the outer
// fields hide the Entry's own of the same JSON names).
type unstamped struct {
	At          *struct{} `json:"at"`
	LockVersion *struct{} `json:"lock_version"`
	Entry
}

// The hand-written encoding of an entry is encoding/json's, byte for byte,
// for every field and every string a field may hold: readers decode it
// with encoding/json, and phasepay_timeline_append finds the two nulls by
// their exact text.
func TestTimelineEncodingIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	status, ms, zero, one := 503, int64(12), 0, 1
	next := time.Date(2026, 12, 4, 21, 6, 49, 123456789, time.FixedZone("x", 3600))
	odd := "a\"b\\c<d>e&f\n\r\t\b\f\x01\x1f é 日本 \u2028\u2029 \xff\xfe end"
	for _, e := range []Entry{
		{Kind: KindClaimed, Holder: "api:vm:1:0badcafe"},
		{Kind: KindReached, Holder: odd, RecoveryPoint: "charge_created"},
		{Kind: KindReleased, Reason: odd, Detail: odd, NextAttemptAt: &next},
		{Kind: KindTakenOver, By: "reaper"},
		{Kind: KindPSPCall, PSP: odd, Operation: "authorize", PSPKey: odd, Outcome: "unknown", Status: &status,
			DurationMS: &ms, Sends: &zero, Lookups: &one},
		{Kind: KindPSPCall, Outcome: "unknown"},
		{Kind: KindFinished, ResponseStatus: 201},
		{Kind: KindMoved, PSP: "secondary"},
		{Kind: KindResolved, By: RoleOperator, Operator: odd, As: "failed", Detail: odd},
		{Kind: Kind(odd)},
	} {
		want, err := json.Marshal(unstamped{Entry: e})
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendUnstamped(nil, e)))
	}
}
