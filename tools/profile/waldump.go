package profile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Index entries are counted from the WAL itself: every B-tree change is a
// record of rmgr Btree whose first block reference names the index's
// relfilenode, so pg_waldump over the run's LSN range says exactly which
// index took how many entries, including the ones no statistics view
// counts (pg_stat_user_indexes counts scans, not inserts).

// WALCounts is the B-tree records of a WAL range: relfilenode → kind →
// records, the kind as pg_waldump (PostgreSQL 15) names it: a new leaf
// entry (INSERT_LEAF; INSERT_POST when it splits a posting list), a
// downlink into an inner page (INSERT_UPPER, INSERT_META), a page split
// (SPLIT_L, SPLIT_R), a new root (NEWROOT) and a deduplication pass (DEDUP).
type WALCounts map[uint32]map[string]int

// parseWaldumpLine reads one line of pg_waldump's output:
//
//	rmgr: Btree len (rec/tot): 64/64, tx: 735, lsn: 0/01A2B3C8, prev 0/01A2B390, desc: INSERT_LEAF off 2, blkref #0: rel 1663/16384/16400 blk 1
//
// and returns its rmgr, its record kind (desc's first word) and the
// relfilenode of its first block reference; ok is false for a line that
// is no record or names no block.
func parseWaldumpLine(line string) (rmgr, kind string, relfilenode uint32, ok bool) {
	rest, found := strings.CutPrefix(line, "rmgr: ")
	if !found {
		return "", "", 0, false
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	rmgr = f[0]
	_, desc, found := strings.Cut(rest, "desc: ")
	if !found {
		return "", "", 0, false
	}
	kind, _, _ = strings.Cut(desc, " ")
	kind = strings.TrimSuffix(kind, ",")
	_, ref, found := strings.Cut(desc, "blkref #0: rel ")
	if !found {
		return "", "", 0, false
	}
	ref, _, _ = strings.Cut(ref, " ")
	parts := strings.Split(ref, "/")
	if len(parts) != 3 {
		return "", "", 0, false
	}
	n, err := strconv.ParseUint(parts[2], 10, 32)
	if err != nil {
		return "", "", 0, false
	}
	return rmgr, kind, uint32(n), true
}

// countBtree counts the B-tree records of pg_waldump's output.
func countBtree(r io.Reader) (WALCounts, error) {
	counts := WALCounts{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		rmgr, kind, rel, ok := parseWaldumpLine(sc.Text())
		if !ok || rmgr != "Btree" {
			continue
		}
		if counts[rel] == nil {
			counts[rel] = map[string]int{}
		}
		counts[rel][kind]++
	}
	return counts, sc.Err()
}

// waldump runs pg_waldump over [start, end) of the cluster's pg_wal and
// counts its B-tree records.
func waldump(ctx context.Context, binDir, dataDir, start, end string) (WALCounts, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_waldump"),
		"-p", filepath.Join(dataDir, "pg_wal"), "-s", start, "-e", end, "-r", "Btree")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pg_waldump: %w", err)
	}
	counts, cerr := countBtree(out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("pg_waldump %s..%s: %w: %s", start, end, err, stderr.String())
	}
	return counts, cerr
}
