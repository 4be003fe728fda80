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
func PSPKey(chargeID string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return chargeID + ":authorize:" + hex.EncodeToString(b)
}
