package webhooks

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Fair delivery. A deliverer has Parallelism slots, one per attempt in
// flight, and an attempt to an endpoint that hangs holds its slot for the
// whole Timeout. Taken in global due order, one tenant with many hanging
// endpoints and a backlog of due deliveries would hold every slot, and
// every other tenant's events would wait behind it for minutes. So who
// goes next is decided by share, not by due order:
//
//   - a tenant holds at most its share of the slots: Parallelism less a
//     quarter, divided by the tenants with attempts in flight (itself
//     counted). A quarter of the slots is thus always left to tenants with
//     nothing in flight, whose next event then starts at once, and a tenant
//     alone can still use three quarters;
//   - a host holds at most PerHost slots (a host many endpoints point at,
//     whoever registered them, cannot take every slot either), shared
//     between the tenants sending to it the same way: a tenant whose
//     endpoints hang on a host leaves room there for the others;
//   - an endpoint holds at most PerEndpoint slots (a slow endpoint leaves
//     its tenant's other endpoints free);
//   - among the tenants the caps admit, the one with the fewest attempts in
//     flight goes first, its oldest due delivery first; between equals, the
//     oldest due delivery. A tenant waiting for a slot thus comes before
//     every tenant that has one, and no tenant waits behind another's
//     backlog.
//
// The counts are this deliverer's (several deliverers each share their own
// slots the same way); what they exclude is left out of the claim in SQL
// (exclusions), and pick chooses among what the claim found.

// caps are a deliverer's limits (DelivererConfig).
type caps struct {
	parallelism, perHost, perEndpoint int
}

// share is a fair share of n slots between k tenants, keeping a quarter of
// them for tenants with nothing in flight; at least 1.
func share(n, k int) int {
	return max(1, (n-n/4)/max(k, 1))
}

type tenantHost struct {
	tenant int64
	host   string
}

// slot is what one attempt in flight is counted by.
type slot struct {
	tenant   int64
	host     string
	endpoint string
}

// load is what a deliverer has in flight. Not safe for concurrent use: the
// Deliverer guards it with its mutex.
type load struct {
	running     int
	tenants     map[int64]int
	hosts       map[string]int
	hostTenants map[string]int // tenants with attempts in flight at a host
	atHost      map[tenantHost]int
	endpoints   map[string]int
}

func newLoad() *load {
	return &load{tenants: map[int64]int{}, hosts: map[string]int{}, hostTenants: map[string]int{},
		atHost: map[tenantHost]int{}, endpoints: map[string]int{}}
}

func (l *load) clone() *load {
	c := *l
	c.tenants, c.hosts, c.hostTenants = maps.Clone(l.tenants), maps.Clone(l.hosts), maps.Clone(l.hostTenants)
	c.atHost, c.endpoints = maps.Clone(l.atHost), maps.Clone(l.endpoints)
	return &c
}

// add counts an attempt starting (n = 1) or ending (n = -1).
func (l *load) add(s slot, n int) {
	th := tenantHost{s.tenant, s.host}
	if l.atHost[th] == 0 && n > 0 {
		l.hostTenants[s.host]++
	}
	l.running += n
	bump(l.tenants, s.tenant, n)
	bump(l.hosts, s.host, n)
	bump(l.atHost, th, n)
	bump(l.endpoints, s.endpoint, n)
	if l.atHost[th] == 0 && n < 0 {
		bump(l.hostTenants, s.host, -1)
	}
}

func bump[K comparable](m map[K]int, k K, n int) {
	if m[k] += n; m[k] <= 0 {
		delete(m, k)
	}
}

// tenantShare is t's share of the slots, t counted among the tenants in
// flight.
func (l *load) tenantShare(c caps, t int64) int {
	k := len(l.tenants)
	if l.tenants[t] == 0 {
		k++
	}
	return share(c.parallelism, k)
}

// hostShare is t's share of host h's slots, t counted among the tenants in
// flight there.
func (l *load) hostShare(c caps, t int64, h string) int {
	k := l.hostTenants[h]
	if l.atHost[tenantHost{t, h}] == 0 {
		k++
	}
	return share(c.perHost, k)
}

// admits reports whether one more attempt counted by s fits every cap.
func (l *load) admits(c caps, s slot) bool {
	return l.running < c.parallelism &&
		l.endpoints[s.endpoint] < c.perEndpoint &&
		l.hosts[s.host] < c.perHost &&
		l.atHost[tenantHost{s.tenant, s.host}] < l.hostShare(c, s.tenant, s.host) &&
		l.tenants[s.tenant] < l.tenantShare(c, s.tenant)
}

// exclusions are what a claim leaves out: what is at its cap now. A tenant,
// host or endpoint not in flight is never at its cap.
type exclusions struct {
	tenants     []int64
	hosts       []string
	tenantHosts []string // "<tenant id>/<host>", as candidatesSQL spells it
	endpoints   []string
}

func (l *load) exclusions(c caps) exclusions {
	ex := exclusions{tenants: []int64{}, hosts: []string{}, tenantHosts: []string{}, endpoints: []string{}}
	for t, n := range l.tenants {
		if n >= l.tenantShare(c, t) {
			ex.tenants = append(ex.tenants, t)
		}
	}
	for h, n := range l.hosts {
		if n >= c.perHost {
			ex.hosts = append(ex.hosts, h)
		}
	}
	for th, n := range l.atHost {
		if n >= l.hostShare(c, th.tenant, th.host) {
			ex.tenantHosts = append(ex.tenantHosts, tenantHostKey(th.tenant, th.host))
		}
	}
	for e, n := range l.endpoints {
		if n >= c.perEndpoint {
			ex.endpoints = append(ex.endpoints, e)
		}
	}
	return ex
}

// candidate is a due delivery a claim may take (candidatesSQL).
type candidate struct {
	TenantID       int64
	EventID        string
	EventCreatedAt time.Time
	EndpointID     string
	Host           string
	Due            time.Time
}

func (c candidate) slot() slot { return slot{tenant: c.TenantID, host: c.Host, endpoint: c.EndpointID} }

// pick chooses, from the due deliveries a claim found, those to take now,
// in order: again and again, of the tenants whose oldest remaining
// candidate every cap admits, the one with the fewest attempts in flight
// (those picked counted), and of equals the one whose candidate has been
// due longest; until the slots are full or nothing fits. A candidate a cap
// refuses is passed over for good: within one pick the counts only grow.
// It does not change l.
func (l *load) pick(c caps, cands []candidate) []candidate {
	l = l.clone()
	queues := map[int64][]candidate{}
	for _, cd := range cands {
		queues[cd.TenantID] = append(queues[cd.TenantID], cd)
	}
	for t := range queues {
		slices.SortStableFunc(queues[t], func(a, b candidate) int { return a.Due.Compare(b.Due) })
	}
	var picked []candidate
	for l.running < c.parallelism {
		var (
			best  int64
			found bool
		)
		for t, q := range queues {
			for len(q) > 0 && !l.admits(c, q[0].slot()) {
				q = q[1:]
			}
			if queues[t] = q; len(q) == 0 {
				delete(queues, t)
				continue
			}
			if !found || before(l, q[0], queues[best][0]) {
				best, found = t, true
			}
		}
		if !found {
			break
		}
		next := queues[best][0]
		queues[best] = queues[best][1:]
		picked = append(picked, next)
		l.add(next.slot(), 1)
	}
	return picked
}

// before orders two tenants' next candidates: fewer attempts in flight
// first, then due longer, then the lower tenant id (a stable order).
func before(l *load, a, b candidate) bool {
	if na, nb := l.tenants[a.TenantID], l.tenants[b.TenantID]; na != nb {
		return na < nb
	}
	if c := a.Due.Compare(b.Due); c != 0 {
		return c < 0
	}
	return cmp.Less(a.TenantID, b.TenantID)
}
