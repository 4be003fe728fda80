package profile

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTableDeltasKeepOnlyTheTablesTheRunWrote(t *testing.T) {
	t.Parallel()
	before := map[string]TableCounts{"charges": {Inserts: 10, Updates: 5, HOT: 1}, "tenants": {Inserts: 1}}
	after := map[string]TableCounts{"charges": {Inserts: 40, Updates: 35, HOT: 21}, "tenants": {Inserts: 1}, "events": {Inserts: 30}}
	require.Equal(t, map[string]TableCounts{
		"charges": {Inserts: 30, Updates: 30, HOT: 20},
		"events":  {Inserts: 30}, // new since before: counts from zero
	}, tableDeltas(before, after))
}

func TestIndexDeltasSumPartitionsUnderTheirRootIndex(t *testing.T) {
	t.Parallel()
	counts := WALCounts{
		100: {"INSERT_LEAF": 3, "SPLIT_R": 1},
		101: {"INSERT_LEAF": 2, "INSERT_POST": 1, "INSERT_UPPER": 1},
		999: {"INSERT_LEAF": 7}, // another database's
	}
	names := map[uint32]string{100: "events_tenant_created", 101: "events_tenant_created", 102: "charges_pkey"}
	require.Equal(t, map[string]IndexCounts{
		"events_tenant_created": {Entries: 6, Splits: 1, Other: 1},
	}, indexDeltas(counts, names))
}

func TestABRatiosAreBOverTheMeansOfA(t *testing.T) {
	t.Parallel()
	a := []*Result{{CPU: CPU{Database: 1.0}, StatementMS: 0.4}, {CPU: CPU{Database: 1.2}, StatementMS: 0.6}}
	b := []*Result{{CPU: CPU{Database: 0.99}, StatementMS: 0.45}, {CPU: CPU{Database: 0.99}, StatementMS: 0.45}}
	r := ABRatios(a, b)
	require.InDelta(t, 0.9, r.DatabaseCPU, 1e-9)
	require.InDelta(t, 0.9, r.StatementTime, 1e-9)
	require.Zero(t, r.WALBytes, "no WAL measured on A: no ratio")
}
