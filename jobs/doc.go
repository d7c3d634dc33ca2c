// Package jobs tracks the work of a session that runs long: shell commands a kernel
// runs, and cells whose calls outlived their blocking budget.
//
// A Job has an id (j1, j2, ... ordered as numbers), a command, a start time, an optional
// pid, one output and exactly one End. Its output goes to an output.Capture (for paged
// reads and saves), which is all the job keeps of it: 1 MiB from the start and the last
// 64 KiB in memory, the first 16 MiB on disk, whatever the output's size and truncation.
// Its reports (Snapshot, Wait) are made from the capture under the job's
// output.Truncation when asked for (kept + dropped = every byte) and kept by no one but
// their caller; past what was retained they name the job and the byte ranges its paged
// reads still get. The events that make a job come from a hostile kernel, so every one
// after the end is ignored and counted, and a second end never replaces the first.
//
// A kill goes through the job's Owner, which the controller supplies (killpg for a shell
// job; interrupt, then kernel kill, for a cell). Kill only asks: the owner reports the end
// later through Finish, so a job can end some time after its kill, or never.
//
// Wait is the one function that blocks on a job: Settled with the end if it comes before
// the deadline, else Detached at the deadline with the output so far. A passed deadline
// detaches at once, even when the end is ready.
//
// A Table holds a session's jobs and answers observations: the live jobs, at most 100,
// in id order, each with id, pid (nil when unknown), command (at most 4096 scalars) and
// start time in Unix milliseconds.
//
//	table, err := jobs.NewTable(jobs.TableOptions{Capture: output.CaptureOptions{SpillDir: dir}})
//	if err != nil {
//		return err
//	}
//	job, err := table.Start(jobs.Spec{Command: cmd, Owner: jobs.OwnerFunc(killGroup)})
//	...
//	// the frame reader: job.Output(bytes) per job_output, job.Finish(end) on job_end
//	switch o := jobs.Wait(ctx, job, time.Now().Add(budget)).(type) {
//	case jobs.Settled:
//		report(o.End, o.Output)
//	case jobs.Detached:
//		reportRunning(o.ID, o.Output) // the job goes on
//	}
package jobs
