package profile

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseWaldumpLineReadsKindAndRelfilenode(t *testing.T) {
	t.Parallel()
	rmgr, kind, rel, ok := parseWaldumpLine("rmgr: Btree       len (rec/tot):     64/    64, tx:        735, lsn: 0/01A2B3C8, prev 0/01A2B390, desc: INSERT_LEAF off 2, blkref #0: rel 1663/16384/16400 blk 1")
	require.True(t, ok)
	require.Equal(t, "Btree", rmgr)
	require.Equal(t, "INSERT_LEAF", kind)
	require.Equal(t, uint32(16400), rel)

	_, kind, rel, ok = parseWaldumpLine("rmgr: Btree       len (rec/tot):   8161/  8161, tx:        740, lsn: 0/01A3, prev 0/01A2, desc: SPLIT_R level: 0, firstrightoff: 154, newitemoff: 154, postingoff: 0, blkref #0: rel 1663/5/24576 blk 3 FPW, blkref #1: rel 1663/5/24576 blk 4")
	require.True(t, ok)
	require.Equal(t, "SPLIT_R", kind)
	require.Equal(t, uint32(24576), rel, "the first block reference names the index")

	for _, line := range []string{
		"",
		"pg_waldump: error: could not find a valid record after 0/1A2B3C8",
		"rmgr: Transaction len (rec/tot):     34/    34, tx:        735, lsn: 0/01A2B408, prev 0/01A2B3C8, desc: COMMIT 2026-12-05 00:00:00.000000 UTC",
		"rmgr: Btree len (rec/tot): 64/64, tx: 1, lsn: 0/1, prev 0/0, desc: INSERT_LEAF off 2, blkref #0: rel 1663/16384/notanumber blk 1",
	} {
		_, _, _, ok := parseWaldumpLine(line)
		require.False(t, ok, "%q", line)
	}
}

func TestCountBtreeCountsEachIndexsRecordsByKind(t *testing.T) {
	t.Parallel()
	out := strings.Join([]string{
		"rmgr: Btree len (rec/tot): 64/64, tx: 1, lsn: 0/1, prev 0/0, desc: INSERT_LEAF off 2, blkref #0: rel 1663/5/100 blk 1",
		"rmgr: Btree len (rec/tot): 64/64, tx: 1, lsn: 0/2, prev 0/1, desc: INSERT_LEAF off 3, blkref #0: rel 1663/5/100 blk 1",
		"rmgr: Btree len (rec/tot): 64/64, tx: 1, lsn: 0/3, prev 0/2, desc: INSERT_UPPER off 3, blkref #0: rel 1663/5/100 blk 0",
		"rmgr: Btree len (rec/tot): 64/64, tx: 1, lsn: 0/4, prev 0/3, desc: INSERT_LEAF off 1, blkref #0: rel 1663/5/200 blk 1",
		"rmgr: Heap len (rec/tot): 64/64, tx: 1, lsn: 0/5, prev 0/4, desc: INSERT off 1, blkref #0: rel 1663/5/300 blk 1",
	}, "\n")
	counts, err := countBtree(strings.NewReader(out))
	require.NoError(t, err)
	require.Equal(t, WALCounts{100: {"INSERT_LEAF": 2, "INSERT_UPPER": 1}, 200: {"INSERT_LEAF": 1}}, counts,
		"heap records are not index entries")
}
