package kernelstart

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// PooledReady is the line a pooled kernel's start command (start.py, under
// DetachedProgram, its block's environment holding KENNEL_KERNEL_POOLED=1) writes on its
// stdout once its kernel is loaded and its socket bound: the kernel then waits for its
// start block (Pooled.HandOut).
const PooledReady = "kennel-pooled/1 ready\n"

// Pooled is the start command of a kernel started ahead of its session (a warm pool's,
// for a transport that reaches its kernels through bridges): running, its kernel ready.
type Pooled struct {
	p    Proc
	said *HeadBuffer
}

// StartPooled runs argv, the start command of a pooled kernel (DetachedProgram, a block
// whose environment makes the kernel detached and pooled), writes block (the encoded
// Block) to its stdin and returns once it wrote PooledReady. A command that ends first
// is a *BridgeError; ctx ending first is ctx's cause; either way the command is closed.
// stderr, when set, gets the command's stderr too.
func StartPooled(ctx context.Context, run Runner, argv []string, block []byte, stderr io.Writer) (*Pooled, error) {
	said := &HeadBuffer{Limit: 2048}
	p, err := run(ctx, argv, teeWriter{said, stderr})
	if err != nil {
		return nil, fmt.Errorf("start pooled kernel: %w", err)
	}
	if err := await(ctx, p, "start", PooledReady, block, said); err != nil {
		return nil, err
	}
	return &Pooled{p: p, said: said}, nil
}

// HandOut gives the pooled kernel its start block (start: the token line, then the
// start line of docs/protocol.md's pooled kernels, at most MaxBlock bytes) and returns
// the command as the kernel's first connection once its bridge is connected
// (BridgeReady), as OpenBridge does. It is called once; on error the command is closed.
func (p *Pooled) HandOut(ctx context.Context, start []byte) (net.Conn, error) {
	if len(start) > MaxBlock {
		p.p.Close()
		return nil, fmt.Errorf("pooled start block of %d bytes: over %d: %w", len(start), MaxBlock, ErrBadBlock)
	}
	framed := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(start)), uint32(len(start)))
	if err := await(ctx, p.p, "start", BridgeReady, append(framed, start...), p.said); err != nil {
		return nil, err
	}
	return p.p, nil
}

// Exit blocks until the command has ended (its kernel ended before its hand-out, or it
// was closed), or ctx ends, and returns its exit status.
func (p *Pooled) Exit(ctx context.Context) (int, error) { return p.p.Exit(ctx) }

// Close ends the command, and so its kernel, which has not been handed out.
func (p *Pooled) Close() error { return p.p.Close() }
