// Package reaper finishes what crashed workers abandoned and keeps the key
// table bounded. Each pass:
//
//  1. completion (every reaper): takes over, in small batches with FOR
//     UPDATE SKIP LOCKED, started keys whose lease expired and whose retry
//     backoff is over, and drives each to done through the very state
//     operation the API runs, through the phase engine (its Resume finds
//     the operation by the name the key's claim stored), so the client's next retry
//     is a replay;
//  2. maintenance, beside the passes (a maintenance.Service: one reaper at
//     a time, under an advisory lock held by the connection the chore runs
//     on, every MaintenanceInterval): creates partitions ahead and drops
//     whole partitions past retention (partitions.go).
//
// A key whose PSP is still failing is released again on its retry schedule;
// it is never given up silently: every pass counts the unfinished keys (in
// flight, waiting for their next attempt, overdue, needs_attention) into
// gauges and logs the overdue and needs_attention ones when their count
// changes, and once a minute while there are any.
//
// A warning logged at every pass made 86,400 lines a day for one request
// that needs an operator, the line that matters buried in its copies. The
// gauges still carry every pass's count for the alerts. The test moves the
// reaper's clock (Config.Clock), not the wall's.
//
//	go test ./internal/reaper/ -run '^TestNeedsAttentionWarningOncePerChangeOrMinute$'
package reaper
