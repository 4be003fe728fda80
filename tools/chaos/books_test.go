package chaos

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The books check passes on agreeing books and names each broken
// invariant: a second capture, a capture and a void, totals that differ,
// a refund beyond the capture, a succeeded refund the PSP never made, a
// failed one it made; and it tolerates exactly what an operation given up
// to an operator may leave.
func TestBooksComparedWithThePSP(t *testing.T) {
	t.Parallel()
	auths := []pspOp{{ID: "auth_1", Reference: "ch_1"}, {ID: "auth_2", Reference: "ch_2"}}
	good := func() (map[string][]pspOp, map[string]*dbCharge, map[string]dbRefund) {
		return map[string][]pspOp{
				"authorizations": auths,
				"captures":       {{ID: "cap_1", Reference: "ch_1", Authorization: "auth_1", Amount: 800}},
				"voids":          {{ID: "void_2", Reference: "ch_2", Authorization: "auth_2"}},
				"refunds": {{ID: "ref_1", Reference: "re_1", Authorization: "auth_1", Amount: 300},
					{ID: "ref_2", Reference: "re_2", Authorization: "auth_1", Amount: 500}},
			}, map[string]*dbCharge{
				"ch_1": {status: "captured", pspRef: "auth_1", captured: 800, refunded: 800},
				"ch_2": {status: "voided", pspRef: "auth_2"},
			}, map[string]dbRefund{
				"re_1": {charge: "ch_1", status: "succeeded", amount: 300},
				"re_2": {charge: "ch_1", status: "succeeded", amount: 500},
				"re_3": {charge: "ch_1", status: "failed", amount: 100},
			}
	}
	check := func(books map[string][]pspOp, charges map[string]*dbCharge, refunds map[string]dbRefund, open map[string]openOps) []string {
		var v []string
		compareBooks(books, charges, refunds, open, func(f string, a ...any) { v = append(v, fmt.Sprintf(f, a...)) })
		return v
	}
	books, charges, refunds := good()
	require.Empty(t, check(books, charges, refunds, nil))

	for name, tc := range map[string]struct {
		breakIt func(map[string][]pspOp, map[string]*dbCharge, map[string]dbRefund)
		want    string
	}{
		"second capture": {func(b map[string][]pspOp, _ map[string]*dbCharge, _ map[string]dbRefund) {
			b["captures"] = append(b["captures"], pspOp{ID: "cap_9", Reference: "ch_1", Authorization: "auth_1", Amount: 1})
		}, "captured 2 times"},
		"capture and void": {func(b map[string][]pspOp, _ map[string]*dbCharge, _ map[string]dbRefund) {
			b["voids"] = append(b["voids"], pspOp{ID: "void_9", Reference: "ch_1", Authorization: "auth_1"})
		}, "both captured and voided"},
		"captured totals differ": {func(_ map[string][]pspOp, c map[string]*dbCharge, _ map[string]dbRefund) {
			c["ch_1"].captured = 900
		}, "PSP captured 800, phasepay amount_captured 900"},
		"refunded totals differ": {func(_ map[string][]pspOp, c map[string]*dbCharge, _ map[string]dbRefund) {
			c["ch_1"].refunded = 300
		}, "PSP refunded 800, phasepay amount_refunded 300"},
		"refund beyond the capture": {func(b map[string][]pspOp, c map[string]*dbCharge, r map[string]dbRefund) {
			b["refunds"] = append(b["refunds"], pspOp{ID: "ref_9", Reference: "re_9", Authorization: "auth_1", Amount: 50})
			r["re_9"] = dbRefund{charge: "ch_1", status: "succeeded", amount: 50}
		}, "beyond its capture"},
		"succeeded refund not at the PSP": {func(b map[string][]pspOp, _ map[string]*dbCharge, _ map[string]dbRefund) {
			b["refunds"] = b["refunds"][:1]
		}, "re_2 succeeded in phasepay, not refunded at the PSP"},
		"failed refund made at the PSP": {func(b map[string][]pspOp, _ map[string]*dbCharge, _ map[string]dbRefund) {
			b["refunds"] = append(b["refunds"], pspOp{ID: "ref_3", Reference: "re_3", Authorization: "auth_1", Amount: 100})
		}, "re_3 failed in phasepay, but refunded at the PSP"},
		"void phasepay never recorded": {func(_ map[string][]pspOp, c map[string]*dbCharge, _ map[string]dbRefund) {
			c["ch_2"].status = "authorized"
		}, "is authorized in phasepay, 1 voids at the PSP"},
	} {
		books, charges, refunds := good()
		tc.breakIt(books, charges, refunds)
		v := check(books, charges, refunds, nil)
		require.NotEmpty(t, v, name)
		require.Contains(t, fmt.Sprint(v), tc.want, name)
	}

	// A void given up to an operator may be at the PSP unrecorded; a
	// refund given up may be refunded there within what it reserved.
	books, charges, refunds = good()
	charges["ch_2"].status = "authorized"
	require.Empty(t, check(books, charges, refunds, map[string]openOps{"ch_2": {void: true}}))
	books, charges, refunds = good()
	charges["ch_1"].refunded, charges["ch_1"].pending = 300, 500
	refunds["re_2"] = dbRefund{charge: "ch_1", status: "pending", amount: 500}
	require.Empty(t, check(books, charges, refunds, map[string]openOps{"ch_1": {refund: true}}))
	require.NotEmpty(t, check(books, charges, refunds, nil))
}
