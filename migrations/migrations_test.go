package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// referenceTables are small tables a distributed PostgreSQL (docs/scaling.md)
// would replicate to every node rather than shard by tenant: tenants
// itself, api_keys, which is looked up by key hash before the tenant is
// known, object_id_secret, one row every node derives ids with, and
// console_sessions, the operator console's, which belong to no tenant.
var referenceTables = map[string]bool{"tenants": true, "api_keys": true, "object_id_secret": true, "console_sessions": true}

// The path to sharding by tenant stays open only while tenant_id leads
// every primary key, foreign key and unique constraint or index of the
// tenant tables. This reads the catalog, so a migration that breaks the
// rule fails here.
func TestTenantIDLeadsEveryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)

	rows, err := pool.Query(ctx, `
		SELECT c.relname, x.conname, x.contype::text, a.attname
		  FROM pg_constraint x
		  JOIN pg_class c ON c.oid = x.conrelid
		  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		  JOIN pg_attribute a ON a.attrelid = x.conrelid AND a.attnum = x.conkey[1]
		 WHERE x.contype IN ('p', 'f', 'u')
		   AND c.relkind IN ('r', 'p')
		   AND NOT c.relispartition
		UNION ALL
		SELECT c.relname, ic.relname, 'i', a.attname
		  FROM pg_index i
		  JOIN pg_class c ON c.oid = i.indrelid
		  JOIN pg_class ic ON ic.oid = i.indexrelid
		  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		 WHERE i.indisunique AND NOT c.relispartition AND c.relname <> 'goose_db_version'`)
	require.NoError(t, err)
	defer rows.Close()
	checked := map[string]int{}
	for rows.Next() {
		var table, name, kind, first string
		require.NoError(t, rows.Scan(&table, &name, &kind, &first))
		if table == "goose_db_version" || (referenceTables[table] && kind != "f") {
			continue
		}
		checked[table]++
		require.Equal(t, "tenant_id", first, "%s.%s (%s) must lead with tenant_id", table, name, kind)
	}
	require.NoError(t, rows.Err())
	for _, table := range []string{"idempotency_keys", "charges", "api_keys"} {
		require.Positive(t, checked[table], "no key of %s was checked", table)
	}
}
