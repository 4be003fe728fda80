package phases

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"
	"time"
)

// keyHints remembers, approximately, the keys this process has seen. A
// request for one of them is probably a retry.
//
// It only decides which of two equally correct paths a request takes
// first. A key not seen here goes straight to the claim's one exchange,
// which also answers a key that exists. A key seen here is read first,
// with a plain lookup that answers a replay, a mismatch or a wait. That
// spares the claim's failed check, which costs the database an aborted
// transaction and an ERROR in its log. Replays were measurably slower when
// every one took the claim's path. A wrong guess costs one read more, or
// nothing more.
//
// The table is a fixed array of slots, indexed by the low bits of a key's
// hash and overwritten by collisions. It needs no allocation, no lock and
// no growth.
// A slot is 64 bits. The top 32 are the hash's tag, the low 32 the UTC day
// the key's row was created (its partition, idempotency.DayPartition), 0
// while unknown. With the day, a retry reads that day's partition by
// primary key (idempotency.Store.PeekDay) instead of going through the
// key's heads. A stale day costs one more read, never another answer.
//
// The table's size is how many recent keys it covers. 2^20 slots (8 MiB)
// keep most of the last million keys, minutes of traffic here, which is
// when retries come. With 2^14 slots, make bench's replays found their
// hint overwritten. A false "seen" (one in 2^32) costs a read or two.
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
// row was created if known (else the zero time).
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

// add remembers the key, and the day its row was created (the zero time
// if not known).
//
// Without a day it keeps the day already known for the key. A request adds
// its key before its claim, when the day is not known yet, and must not
// make a concurrent retry forget it.
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

// noDay remembers the key without a day, forgetting the one known.
//
// A day's partition may not answer for a key whose newest row says it is
// of that day. The row sits in an operator's DEFAULT partition, or the
// partition is being detached. Without this, every retry would pay a
// failed read.
func (h *keyHints) noDay(tenantID int64, key string) {
	s, tag := h.slot(tenantID, key)
	s.Store(tag)
}

const secondsPerDay = 24 * 60 * 60

// dayOf is the UTC day of t in days since the Unix epoch. It is 0 for the
// zero time and any time before 1970-01-02, which no key has.
func dayOf(t time.Time) uint32 {
	if t.IsZero() || t.Unix() < secondsPerDay {
		return 0
	}
	return uint32(t.Unix() / secondsPerDay)
}
