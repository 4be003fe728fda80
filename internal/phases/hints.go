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
// The table is a fixed array of slots, each the top 32 bits of a key's
// hash, indexed by its low bits and overwritten by collisions: no
// allocation, no lock, no growth. A key is remembered until a later key
// takes its slot, so the table's size is how many recent keys it covers:
// 2^20 slots (4 MiB) keep most of the last million keys, minutes of
// traffic at this machine's rates, which is when retries come. (With 2^14
// slots, make bench's replays, of keys tens of thousands of charges old,
// found their hint overwritten and went through the claim.) A false
// "seen" (two keys sharing slot and tag, one in 2^32) costs one read.
type keyHints struct {
	seed  maphash.Seed
	slots [1 << 20]atomic.Uint32
}

func newKeyHints() *keyHints { return &keyHints{seed: maphash.MakeSeed()} }

func (h *keyHints) slot(tenantID int64, key string) (*atomic.Uint32, uint32) {
	var m maphash.Hash
	m.SetSeed(h.seed)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(tenantID))
	_, _ = m.Write(b[:])
	_, _ = m.WriteString(key)
	sum := m.Sum64()
	tag := uint32(sum>>32) | 1 // never 0, the empty slot
	return &h.slots[sum&(uint64(len(h.slots))-1)], tag
}

// seen reports whether the key was probably added before.
func (h *keyHints) seen(tenantID int64, key string) bool {
	s, tag := h.slot(tenantID, key)
	return s.Load() == tag
}

// add remembers the key.
func (h *keyHints) add(tenantID int64, key string) {
	s, tag := h.slot(tenantID, key)
	s.Store(tag)
}
