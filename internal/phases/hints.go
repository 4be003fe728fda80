package phases

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"
	"time"
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
// The table is a fixed array of slots, indexed by the low bits of a key's
// hash and overwritten by collisions: no allocation, no lock, no growth.
// A slot is 64 bits: the top 32 bits of the hash (the tag), and the day
// the key's row was created (days since the Unix epoch, UTC: its
// partition, idempotency.DayPartition), 0 while unknown. With the day, a
// probable retry reads that day's partition by primary key
// (idempotency.Store.PeekDay) instead of going through the key's heads;
// a day gone stale (the partition dropped, the key claimed anew elsewhere)
// costs one more read, never another answer. (A 16-bit day and a 16-bit
// tag would keep 4 MiB, but one key in 65,536 would then be a false
// "seen", and 16 bits of days end in 2149.) A key is remembered until a
// later key takes its slot, so the table's size is how many recent keys
// it covers: 2^20 slots (8 MiB) keep most of the last million keys,
// minutes of traffic at this machine's rates, which is when retries come.
// (With 2^14 slots, make bench's replays, of keys tens of thousands of
// charges old, found their hint overwritten and went through the claim.)
// A false "seen" (two keys sharing slot and tag, one in 2^32) costs one
// read, and its day, another key's, one more.
type keyHints struct {
	seed  maphash.Seed
	slots [1 << 20]atomic.Uint64
}

func newKeyHints() *keyHints { return &keyHints{seed: maphash.MakeSeed()} }

func (h *keyHints) slot(tenantID int64, key string) (*atomic.Uint64, uint64) {
	var m maphash.Hash
	m.SetSeed(h.seed)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(tenantID))
	_, _ = m.Write(b[:])
	_, _ = m.WriteString(key)
	sum := m.Sum64()
	tag := sum>>32<<32 | 1<<32 // never 0, the empty slot
	return &h.slots[sum&(uint64(len(h.slots))-1)], tag
}

// seen reports whether the key was probably added before, and the day its
// row was created if that was known (the zero time if not).
func (h *keyHints) seen(tenantID int64, key string) (day time.Time, ok bool) {
	s, tag := h.slot(tenantID, key)
	v := s.Load()
	if v&^0xffffffff != tag {
		return time.Time{}, false
	}
	if d := uint32(v); d != 0 {
		day = time.Unix(int64(d)*secondsPerDay, 0).UTC()
	}
	return day, true
}

// add remembers the key, and the day its row was created (created_at; the
// zero time if not known). Without a day it keeps the day already known
// for the same key: a request adds its key before its claim, when the day
// is not known yet, and must not make a concurrent retry forget it.
func (h *keyHints) add(tenantID int64, key string, createdAt time.Time) {
	s, tag := h.slot(tenantID, key)
	v := tag | uint64(dayOf(createdAt))
	if createdAt.IsZero() {
		if s.Load()&^0xffffffff == tag {
			return
		}
	}
	s.Store(v)
}

// noDay remembers the key without a day, forgetting the one known: a day
// whose partition did not answer for a key its newest row says is of that
// day (the day's keys in an operator's DEFAULT partition, or the partition
// being detached) would otherwise cost every retry a failed read.
func (h *keyHints) noDay(tenantID int64, key string) {
	s, tag := h.slot(tenantID, key)
	s.Store(tag)
}

const secondsPerDay = 24 * 60 * 60

// dayOf is the UTC day of t in days since the Unix epoch (0: the zero
// time, or any time before 1970-01-02, which no key has).
func dayOf(t time.Time) uint32 {
	if t.IsZero() || t.Unix() < secondsPerDay {
		return 0
	}
	return uint32(t.Unix() / secondsPerDay)
}
