package webhooks

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// defaultCaps are a deliverer's defaults: 16 slots, 8 per host, 2 per
// endpoint.
var defaultCaps = caps{parallelism: 16, perHost: 8, perEndpoint: 2}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// due makes n candidates of tenant t, spread over endpoints (each on
// host), due from t0+start seconds on.
func due(t int64, host string, endpoints, n, start int) []candidate {
	out := make([]candidate, n)
	for i := range out {
		out[i] = candidate{TenantID: t, EventID: fmt.Sprintf("evt_%d_%d", t, start+i), Host: host,
			EndpointID: fmt.Sprintf("we_%d_%s_%d", t, host, i%endpoints), Due: t0.Add(time.Duration(start+i) * time.Second)}
	}
	return out
}

func loaded(slots ...[]candidate) *load {
	l := newLoad()
	for _, s := range slots {
		for _, c := range s {
			l.add(c.slot(), 1)
		}
	}
	return l
}

func countByTenant(cs []candidate) map[int64]int {
	out := map[int64]int{}
	for _, c := range cs {
		out[c.TenantID]++
	}
	return out
}

// Who goes next is decided by share, not by due order: the pitfall of a
// tenant whose endpoints hang holding back every other tenant.
func TestFairShareOfSlots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		load  *load
		cands []candidate
		want  map[int64]int // picks by tenant
	}{{
		name:  "a tenant alone takes three quarters of the slots, two per endpoint",
		load:  newLoad(),
		cands: append(due(1, "a.example", 10, 40, 0), due(1, "b.example", 10, 40, 0)...),
		want:  map[int64]int{1: 12},
	}, {
		name:  "a tenant at its share gets nothing more; a newcomer gets its due deliveries, however late they are due",
		load:  loaded(due(1, "a.example", 10, 6, 0), due(1, "b.example", 10, 6, 0)),
		cands: append(append(due(1, "a.example", 10, 40, 100), due(1, "b.example", 10, 40, 100)...), due(2, "c.example", 3, 3, 500)...),
		want:  map[int64]int{2: 3},
	}, {
		name:  "the tenant with fewer attempts in flight goes first, so two newcomers share what is free",
		load:  loaded(due(1, "a.example", 10, 10, 0)),
		cands: append(due(2, "b.example", 16, 16, 1000), due(3, "c.example", 16, 16, 2000)...),
		want:  map[int64]int{2: 3, 3: 3},
	}, {
		name:  "a host holds at most three quarters of its slots for one tenant",
		load:  newLoad(),
		cands: due(1, "a.example", 16, 40, 0),
		want:  map[int64]int{1: 6},
	}, {
		name:  "a host's slots are shared between the tenants sending to it",
		load:  loaded(due(1, "hang.example", 16, 6, 0)),
		cands: append(due(1, "hang.example", 16, 40, 10), due(2, "hang.example", 1, 5, 500)...),
		want:  map[int64]int{2: 2}, // the host has 2 left; tenant 2's share of it is 3, its one endpoint's cap 2
	}, {
		name: "many tenants on one host fill it to its cap and no further",
		load: newLoad(),
		cands: func() []candidate {
			var out []candidate
			for i := range 12 {
				out = append(out, due(int64(i+1), "hang.example", 4, 4, 10*i)...)
			}
			return out
		}(),
		want: map[int64]int{1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := *tc.load
			picked := tc.load.pick(defaultCaps, tc.cands)
			require.Equal(t, tc.want, countByTenant(picked))
			require.Equal(t, before.running, tc.load.running, "pick changed the load")
		})
	}
}

// Between tenants with as many attempts in flight, the delivery due
// longest goes first.
func TestFairPickTakesLongestDueFirst(t *testing.T) {
	t.Parallel()
	l := loaded(due(1, "a.example", 1, 1, 0), due(2, "b.example", 1, 1, 0))
	picked := l.pick(defaultCaps, append(due(1, "a.example", 2, 2, 50), due(2, "b.example", 2, 2, 40)...))
	require.Len(t, picked, 4)
	for i, want := range []int64{2, 1, 2, 1} {
		require.Equal(t, want, picked[i].TenantID, "pick %d", i)
	}
}

// What a claim leaves out is exactly what is at its cap, and the counts
// go back to nothing when the attempts end.
func TestFairExclusions(t *testing.T) {
	t.Parallel()
	hanging := due(1, "hang.example", 6, 6, 0)
	slow := due(2, "slow.example", 1, 2, 0)
	l := loaded(hanging, slow)
	ex := l.exclusions(defaultCaps)
	require.ElementsMatch(t, []int64{1}, ex.tenants, "a share of 2 tenants: 6 each")
	require.ElementsMatch(t, []string{"1/hang.example"}, ex.tenantHosts)
	require.ElementsMatch(t, []string{"we_2_slow.example_0"}, ex.endpoints)
	require.Empty(t, ex.hosts)

	l = loaded(due(1, "a.example", 6, 6, 0), due(1, "b.example", 6, 6, 0))
	require.ElementsMatch(t, []int64{1}, l.exclusions(defaultCaps).tenants)

	l = loaded(hanging, slow)
	for _, c := range append(hanging, slow...) {
		l.add(c.slot(), -1)
	}
	require.Equal(t, newLoad(), l)
}
