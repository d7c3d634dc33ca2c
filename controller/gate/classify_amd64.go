//go:build !purego

package gate

// classifyAVX2 classifies len(b)/64 blocks of b into out[:len(b)/64]; len(b) must be a
// multiple of 64, and out must hold that many entries.
//
//go:noescape
func classifyAVX2(b []byte, out *blockMasks)

// classifyFast reports that classify runs on vectors, so that the structural scan pays.
var classifyFast = hasAVX2

// classify classifies the len(b)/64 blocks of b (len(b) a multiple of 64) into out.
func classify(b []byte, out []blockMasks) {
	if len(b) < 64 {
		return
	}
	_ = out[len(b)/64-1]
	if hasAVX2 {
		classifyAVX2(b, &out[0])
		return
	}
	classifyGo(b, out)
}
