package tenants

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const tenantByNameSQL = `SELECT id, name FROM tenants WHERE name = $1`

// ByName returns the tenant called name, or ErrTenantNotFound.
func ByName(ctx context.Context, q DBTX, name string) (Tenant, error) {
	var t Tenant
	err := q.QueryRow(ctx, tenantByNameSQL, name).Scan(&t.ID, &t.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, fmt.Errorf("tenant %q: %w", name, ErrTenantNotFound)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenant %q: %w", name, err)
	}
	return t, nil
}

const tenantNamesSQL = `SELECT id, name FROM tenants WHERE id = ANY($1)`

// Names returns the names of the tenants with the given ids.
func Names(ctx context.Context, q DBTX, ids []int64) (map[int64]string, error) {
	rows, err := q.Query(ctx, tenantNamesSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("tenant names: %w", err)
	}
	names := map[int64]string{}
	var t Tenant
	_, err = pgx.ForEachRow(rows, []any{&t.ID, &t.Name}, func() error {
		names[t.ID] = t.Name
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tenant names: %w", err)
	}
	return names, nil
}
