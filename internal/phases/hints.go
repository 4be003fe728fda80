package phases

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"
)

// keyHints remembers, approximately, the keys this process has seen: a
// request for one of them is probably a retry. It decides nothing but
// which of two equally correct paths a request takes first:
//
//   - a key not seen here (most likely new) goes straight to the claim's
//     one exchange, which also answers a key that exists (its check fails
//     and rolls the exchange back);
//   - a key seen here (most likely a retry) is read first, with a plain
//     lookup that answers a replay, a mismatch or a wait without the
//     claim's failed check: a failed statement costs the database an
//     aborted transaction and an ERROR in its log, which made replays
//     measurably slower when every replay took the claim's path.
//
// Both cost one round trip for what they expect. A wrong guess costs one
// more (a seen key that turns out unfinished goes on to the claim) or
// nothing more (an unseen key that exists is answered by the claim's
// exchange). A retry that reaches another process is an unseen key there.
// The table is a fixed array of hashes, one per slot, overwritten by
// collisions: no allocation, no lock, no growth.
type keyHints struct {
	seed  maphash.Seed
	slots [1 << 14]atomic.Uint64
}

func newKeyHints() *keyHints { return &keyHints{seed: maphash.MakeSeed()} }

func (h *keyHints) slot(tenantID int64, key string) (*atomic.Uint64, uint64) {
	var m maphash.Hash
	m.SetSeed(h.seed)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(tenantID))
	_, _ = m.Write(b[:])
	_, _ = m.WriteString(key)
	sum := m.Sum64() | 1 // never 0, the empty slot
	return &h.slots[sum&(uint64(len(h.slots))-1)], sum
}

// seen reports whether the key was probably added before.
func (h *keyHints) seen(tenantID int64, key string) bool {
	s, sum := h.slot(tenantID, key)
	return s.Load() == sum
}

// add remembers the key.
func (h *keyHints) add(tenantID int64, key string) {
	s, sum := h.slot(tenantID, key)
	s.Store(sum)
}
