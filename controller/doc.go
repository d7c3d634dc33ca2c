// Package controller runs sessions: it starts a kernel over a transports.Transport, puts
// every frame the kernel writes through the frame gate (package controller/gate), serves the
// kernel's host requests, and runs cells and shell jobs.
//
// Cells run with Execute (wait for the end) or ExecuteWait (a cell as a job that detaches
// after its budget); shell commands run in the sandbox as jobs with RunJob. Every job has
// one end, one bounded, retained output (packages jobs and output) and is killed through
// its owner. A local or container kernel's job writes into files the controller tails
// (a remote one's, files its transport streams), which outlive the controller; elsewhere
// its bytes come as job_output frames.
//
// A Session owns one kernel at a time. When the kernel breaks the protocol (a
// gate.ProtocolFault) the session fails the work in flight with that fault, logs it, kills
// the kernel and starts a fresh one for the next cell: the kernel is replaced loudly, and the
// namespace is lost. The controller never switches on the kind of transport.
//
// A minimal use:
//
//	s, err := controller.Start(ctx, controller.Options{
//		Transport: local.New(local.Options{}),
//		Dir:       "/home/me/project",
//	})
//	if err != nil { ... }
//	defer s.Close(context.WithoutCancel(ctx))
//	res, err := s.Execute(ctx, "6*7", controller.WriterSink{Stdout: os.Stdout, Stderr: os.Stderr})
//	// res.Status == "ok", *res.Result == "42"
package controller
