package transports

import "time"

// Info.Pool's words: a kernel a warm pool handed out, or one started cold beside a pool
// that had none ready of its description.
const (
	PoolHit  = "hit"
	PoolMiss = "miss"
)

// PoolStats is what a transport's warm pool has done so far.
type PoolStats struct {
	// Size is the number of ready kernels the pool keeps; Ready how many it has now.
	Size, Ready int
	// Hits counts kernels handed out; Misses kernels started cold beside the pool (none
	// ready, or none of the session's description).
	Hits, Misses uint64
	// Refills counts the kernels the pool made ready; RefillTime is their time in all
	// (from the start of each to a kernel waiting for its session), LastRefill the
	// newest one's.
	Refills                uint64
	RefillTime, LastRefill time.Duration
	// Failures counts the pool's kernels that did not get ready (each logged, then tried
	// again after a backoff of up to 30 s) or could not be handed out (the session then
	// started cold).
	Failures uint64
}
