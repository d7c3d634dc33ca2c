package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// caughtSignal is the cause of a command's context when SIGINT or SIGTERM ended it.
type caughtSignal struct{ sig syscall.Signal }

func (c caughtSignal) Error() string { return "caught " + signalName(c.sig) }

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// hardKey is the context key of the channel closed at a second signal.
type hardKey struct{}

// withSignals returns a context that a first SIGINT or SIGTERM cancels (its cause a
// caughtSignal: the running cell is interrupted, then its kernel killed after the grace),
// and whose hardStop channel a second one closes (the kernel is killed at once). stop
// releases the signals.
func withSignals(parent context.Context) (ctx context.Context, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(parent)
	hard := make(chan struct{})
	ctx = context.WithValue(ctx, hardKey{}, (<-chan struct{})(hard))
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			cancel(caughtSignal{sig.(syscall.Signal)})
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "kennel: %s again: killing the kernel now\n", signalName(sig.(syscall.Signal)))
			close(hard)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// hardStop is closed when a second signal asks to stop at once; nil (never closed) for a
// context withSignals did not make.
func hardStop(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(hardKey{}).(<-chan struct{})
	return ch
}

// interrupted is the exit of a command that ctx's signal ended: 130 for SIGINT, 143 for
// SIGTERM (128 + the signal), with msg.
func interrupted(ctx context.Context, msg string) *exitError {
	code := 130
	var c caughtSignal
	if errors.As(context.Cause(ctx), &c) {
		code = 128 + int(c.sig)
	}
	return &exitError{code: code, msg: msg}
}
