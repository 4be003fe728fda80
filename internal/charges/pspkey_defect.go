//go:build defect_fresh_psp_key

package charges

import (
	"crypto/rand"
	"encoding/hex"
)

// PSPKey, in this deliberately broken build (tag defect_fresh_psp_key), is
// fresh on every call: the pitfall of not propagating a stable key
// downstream. It exists only so the chaos harness can prove it catches the
// double authorizations this causes (internal/chaos's defect test). Never
// build it otherwise.
//
// The lookup by reference before every resend would hide the fresh key
// (it finds the first authorization, so nothing is resent), so this build
// also skips it (defectNoLookup): a naive client with neither defence.
func PSPKey(chargeID string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return chargeID + ":authorize:" + hex.EncodeToString(b)
}

// defectNoLookup: every attempt sends at once, as a first send does.
const defectNoLookup = true
