package procs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ClockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// this runs on.
const ClockTicks = 100

// TicksToMillis converts /proc's clock ticks to milliseconds.
func TicksToMillis(ticks int64) float64 { return float64(ticks) * 1000 / ClockTicks }

// TicksSince sums after − before over after's processes (pid → ticks): a
// process that started between the two counts from zero, one that ended
// is missed, which a pool under load does not do.
func TicksSince(before, after map[int]int64) int64 {
	var d int64
	for pid, t := range after {
		d += t - before[pid]
	}
	return d
}

// MachineTicks is the CPU time every process of the machine has used, from
// /proc/stat's first line (user, nice, system, irq, softirq, steal: not
// idle or iowait).
func MachineTicks() (int64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var sum int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		sum += v
	}
	return sum, nil
}

// ProcessTicks is a process's user and system CPU time, from
// /proc/<pid>/stat; 0 for a process that is gone.
func ProcessTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}
