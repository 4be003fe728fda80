package charges_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// failoverBundle is a database and the standby a failover promotes in its
// place, seen as two databases: the standby is a clone taken before the
// step whose commits the promotion loses (promote), and the mock PSP,
// shared, remembers what the lost commits sent it.
type failoverBundle struct {
	t       *testing.T
	primary string // the old primary's database URL
	tenant  int64
	mock    *mockpsp.Mock
	client  *psp.Client
	keys    *idempotency.Store
}

func newFailoverBundle(t *testing.T) *failoverBundle {
	t.Helper()
	ctx := context.Background()
	b := &failoverBundle{t: t, primary: testdb.NewURL(t)}
	conn, err := pgx.Connect(ctx, b.primary)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&b.tenant))
	require.NoError(t, conn.Close(ctx))
	b.mock, err = mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	srv := httptest.NewServer(b.mock)
	t.Cleanup(srv.Close)
	b.client, err = psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	require.NoError(t, err)
	b.keys, err = idempotency.NewStore(idempotency.Config{Lease: time.Minute})
	require.NoError(t, err)
	return b
}

// standby clones the old primary as it is now (no session may be open on
// it): what a standby that received nothing after this moment holds.
func (b *failoverBundle) standby() string {
	b.t.Helper()
	ctx := context.Background()
	admin := testdb.Admin(b.t)
	u, err := url.Parse(b.primary)
	require.NoError(b.t, err)
	from := u.Path[1:]
	name := fmt.Sprintf("%s_standby_%d", from, time.Now().UnixNano()%1_000_000)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(b.t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, from))
	require.NoError(b.t, err)
	b.t.Cleanup(func() {
		ctx := context.Background()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = c.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
			_ = c.Close(ctx)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// create runs one POST /v1/charges on the database at dbURL, on a pool and
// a service of its own (closed after), as an api process would.
func (b *failoverBundle) create(dbURL, key, body string) phases.Result {
	b.t.Helper()
	return b.createAt(dbURL, key, body, time.Time{})
}

// createAt is create with the database clock at clock (zero: the real one).
func (b *failoverBundle) createAt(dbURL, key, body string, clock time.Time) phases.Result {
	b.t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(b.t, err)
	dbpool.ConfigurePool(cfg, dbURL)
	if !clock.IsZero() {
		cfg.ConnConfig.RuntimeParams["phasepay.now"] = clock.UTC().Format(time.RFC3339Nano)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b.t, err)
	defer pool.Close()
	svc := chargestest.NewService(b.t, pool, b.keys, b.client, phases.Config{})
	req, _ := chargestest.Request(b.t, body)
	res, err := svc.Create(ctx, b.tenant, key, phases.Parsed(req))
	require.NoError(b.t, err)
	svc.Wait()
	return res
}

func (b *failoverBundle) authorizations() []mockpsp.LedgerEntry { return b.mock.Authorizations() }

const visaBody = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

// With asynchronous replication, a claim committed on the old primary and
// not yet replicated is gone after the promotion: charge row, key and all,
// while the PSP already holds an authorization under the charge's key. The
// client's retry claims the key again on the new primary. With a random
// charge id it made a new charge under a new PSP key, and the PSP
// authorized the same intent twice: a double charge no fencing can see,
// since the database that fences it no longer knows the first. The id is
// derived from what the retry carries (tenant, key, request), so the retry
// makes the same charge, sends the same PSP key, and the PSP answers it
// with its first authorization.
func TestClaimLostInFailoverAuthorizesOnce(t *testing.T) {
	t.Parallel()
	b := newFailoverBundle(t)
	standby := b.standby() // replicated: nothing of what follows

	first := b.create(b.primary, "order-1", visaBody)
	require.Equal(t, http.StatusCreated, first.Response.Status)
	require.Len(t, b.authorizations(), 1)

	// The promotion: the retry reaches the standby, which never saw the claim.
	retry := b.create(standby, "order-1", visaBody)
	require.Equal(t, http.StatusCreated, retry.Response.Status)
	require.Equal(t, phases.OutcomeNew, retry.Outcome, "the key is new to the promoted standby")
	require.Equal(t, chargeID(t, first.Response), chargeID(t, retry.Response), "the retry derives the lost claim's charge id")
	auths := b.authorizations()
	require.Len(t, auths, 1, "the PSP authorized the intent %d times: %+v", len(auths), auths)
	require.Equal(t, charges.PSPKey(chargeID(t, first.Response)), auths[0].IdempotencyKey)
}

// What no id can close: an answer the client got from a transaction the
// promotion lost. The retry is a new request to the promoted standby and
// is answered anew: the same charge and authorization (derived ids), but
// not the bytes the client saw: the charge's created_at is the retry's,
// seconds later. So "every
// 2xx answered is stored and replayed identically" holds across a
// failover only when no acknowledged commit is lost: synchronous
// replication (docs/operations.md, "PostgreSQL failover").
func TestAnswerLostInFailoverIsNotReplayed(t *testing.T) {
	t.Parallel()
	b := newFailoverBundle(t)
	standby := b.standby()

	first := b.create(b.primary, "order-1", visaBody)
	require.Equal(t, http.StatusCreated, first.Response.Status)
	// A failover takes seconds, and the answer's created_at counts them:
	// the promoted standby's clock stands a few seconds later.
	retry := b.createAt(standby, "order-1", visaBody, time.Now().Add(3*time.Second))
	require.Equal(t, phases.OutcomeNew, retry.Outcome, "a replay needs the stored answer, which the promotion lost")
	require.Equal(t, chargeID(t, first.Response), chargeID(t, retry.Response))
	require.NotEqual(t, string(first.Response.Body), string(retry.Response.Body),
		"the answer is rebuilt, not replayed: only synchronous replication keeps the first")
	require.Len(t, b.authorizations(), 1)
}

// The same key and body claimed again after retention forgot the key is a
// new intent (the contract: "after it, the same key is a new request"):
// its charge must not be the one the previous incarnation created, which
// is kept. The derived id of incarnation 0 is taken, so the claim derives
// incarnation 1's; and a retry of that claim lost in a failover derives
// incarnation 1's again, since the earlier incarnation's charge was
// replicated long before.
func TestKeyReusedAfterRetentionDerivesItsOwnID(t *testing.T) {
	t.Parallel()
	b := newFailoverBundle(t)
	ctx := context.Background()

	first := b.create(b.primary, "order-1", visaBody)
	// Retention: the key's partition dropped, its charge kept.
	conn, err := pgx.Connect(ctx, b.primary)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, b.tenant, "order-1")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	standby := b.standby()

	second := b.create(b.primary, "order-1", visaBody)
	require.Equal(t, http.StatusCreated, second.Response.Status)
	require.NotEqual(t, chargeID(t, first.Response), chargeID(t, second.Response), "a new intent, a new charge")
	require.Len(t, b.authorizations(), 2, "two intents, two authorizations")

	lost := b.create(standby, "order-1", visaBody)
	require.Equal(t, chargeID(t, second.Response), chargeID(t, lost.Response), "the retry of the second incarnation derives its id")
	require.Len(t, b.authorizations(), 2)

	// Another tenant's same key and body: another id.
	other := *b
	conn, err = pgx.Connect(ctx, b.primary)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('u') RETURNING id`).Scan(&other.tenant))
	require.NoError(t, conn.Close(ctx))
	third := other.create(b.primary, "order-1", visaBody)
	require.NotEqual(t, chargeID(t, first.Response), chargeID(t, third.Response))
	require.NotEqual(t, chargeID(t, second.Response), chargeID(t, third.Response))
}
