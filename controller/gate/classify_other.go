//go:build !amd64 || purego

package gate

// classifyFast reports that classify runs on vectors, so that the structural scan pays.
// Here it does not: every line goes to validator.object's string skipping.
const classifyFast = false

// classify classifies the len(b)/64 blocks of b (len(b) a multiple of 64) into out.
func classify(b []byte, out []blockMasks) { classifyGo(b, out) }
