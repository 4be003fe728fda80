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

func TestStatementRatiosPairTheSameStatementOnBothSides(t *testing.T) {
	t.Parallel()
	run := func(insert, update float64) *Result {
		return &Result{Statements: []StatementPerCharge{
			{Query: "INSERT", CallsPerCharge: 1, MeanMS: insert},
			{Query: "UPDATE", CallsPerCharge: 1, MeanMS: update},
			{Query: "SELECT rare", CallsPerCharge: 0.01, MeanMS: 5},
		}}
	}
	a := []*Result{run(0.10, 0.08), run(0.12, 0.08)}
	b := []*Result{run(0.08, 0.09), run(0.09, 0.07)}
	r := StatementRatios(a, b)
	require.Len(t, r, 2, "a statement run less than once per charge is left out")
	require.Equal(t, "INSERT", r[0].Query)
	require.InDelta(t, 0.17/0.22, r[0].Ratio, 1e-9)
	require.Equal(t, 2, r[0].BLower)
	require.Equal(t, 1, r[1].BLower, "B lower in one pair of two")
	require.Equal(t, 2, r[1].Pairs)
}
