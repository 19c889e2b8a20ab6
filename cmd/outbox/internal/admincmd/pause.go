package admincmd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/internal/ops"
)

// TargetFlags name what pause and resume act on.
type TargetFlags struct {
	Topic     string        `placeholder:"TOPIC" noconfig:"" help:"A topic: its entries are (or are no longer) held back, on every partition."`
	Partition string        `placeholder:"N" noconfig:"" help:"A partition, from 0 to the partition count less one: none of its entries is (or all are again) delivered."`
	Timeout   time.Duration `default:"30s" help:"Give up after this long."`
}

// target checks the flags against an outbox of partitions partitions;
// its errors name the flags.
func (f TargetFlags) target(partitions int) (ops.PauseTarget, error) {
	t, err := ops.ParsePauseTarget(ops.PauseSpec{Topic: f.Topic, Partition: f.Partition}, partitions)
	var fe *ops.FieldError
	switch {
	case errors.Is(err, ops.ErrNoTarget):
		return t, cli.UsageError("say what to act on: --topic TOPIC or --partition N")
	case errors.Is(err, ops.ErrTwoTargets):
		return t, cli.UsageError("--topic and --partition: give one of them, not both")
	case errors.As(err, &fe):
		return t, cli.UsageError("--%s: %v", fe.Field, fe.Err)
	}
	return t, err
}

// PauseCmd pauses delivery of a topic or a partition.
type PauseCmd struct {
	cli.StoreFlags
	TargetFlags
}

// ResumeCmd resumes delivery of a topic or a partition.
type ResumeCmd struct {
	cli.StoreFlags
	TargetFlags
}

// Run pauses.
func (c *PauseCmd) Run(app *cli.App) error { return run(app, c.StoreFlags, c.TargetFlags, true) }

// Run resumes.
func (c *ResumeCmd) Run(app *cli.App) error { return run(app, c.StoreFlags, c.TargetFlags, false) }

func run(app *cli.App, sf cli.StoreFlags, tf TargetFlags, pause bool) error {
	if _, err := tf.target(math.MaxInt); err != nil { // before connecting: the flags alone
		return err
	}
	return sf.With(tf.Timeout, cli.OpenOptions{}, func(ctx context.Context, o *cli.Opened) error {
		return tf.apply(ctx, app, o, pause)
	})
}

// apply pauses (or resumes) the target the flags name in the opened
// outbox and says what changed.
func (f TargetFlags) apply(ctx context.Context, app *cli.App, o *cli.Opened, pause bool) error {
	cmd := "resume"
	if pause {
		cmd = "pause"
	}
	t, err := f.target(o.Store.Partitions())
	if err != nil {
		return err
	}
	p, err := need[outbox.Pauser](o.Store, "Pauser", cmd)
	if err != nil {
		return err
	}
	var c ops.PauseChange
	if pause {
		c, err = ops.Pause(ctx, p, t)
	} else {
		c, err = ops.Resume(ctx, p, t)
	}
	if err != nil {
		return o.Explain(err)
	}
	printChange(app, o, c, pause)
	return nil
}

// printChange says what a pause or resume changed and when relays see it.
func printChange(app *cli.App, o *cli.Opened, c ops.PauseChange, pause bool) {
	out := app.Stdout
	since := c.Since.UTC().Format(time.RFC3339)
	undo := commandLine(o, "resume", "--topic", cli.ShellQuote(c.Target.Topic))
	if !c.Target.IsTopic() {
		undo = commandLine(o, "resume", "--partition", strconv.Itoa(c.Target.Partition))
	}
	switch {
	case pause && !c.Changed:
		fmt.Fprintf(out, "%s of %s was already paused (since %s): nothing changed\n", c.Target, o.Outbox, since)
	case pause && c.Target.IsTopic():
		fmt.Fprintf(out, "paused %s of %s (since %s): every relay stops handing its entries to the sink within one poll interval; "+
			"they stay pending, with no attempt counted, and hold back the later entries of their keys; %s delivers them again\n",
			c.Target, o.Outbox, since, undo)
	case pause:
		fmt.Fprintf(out, "paused %s of %s (since %s): every relay stops delivering its entries within one poll interval; "+
			"they stay pending, with no attempt counted; %s delivers them again\n", c.Target, o.Outbox, since, undo)
	case !c.Changed:
		fmt.Fprintf(out, "%s of %s was not paused: nothing changed\n", c.Target, o.Outbox)
	default:
		fmt.Fprintf(out, "resumed %s of %s (paused since %s): every relay delivers its entries again within one poll interval\n", c.Target, o.Outbox, since)
	}
	if n := len(c.Paused.Topics) + len(c.Paused.Partitions); n > 0 {
		fmt.Fprintf(out, "paused now: %s\n", pausedList(c.Paused))
	}
}

// pausedList names what p holds: `topic "a" (since T), partition 1 (since T)`.
func pausedList(p outbox.Paused) string {
	var s string
	add := func(what string, since time.Time) {
		if s != "" {
			s += ", "
		}
		s += what + " (since " + since.UTC().Format(time.RFC3339) + ")"
	}
	for _, t := range p.Topics {
		add(ops.PauseTarget{Topic: t.Topic}.String(), t.Since)
	}
	for _, pp := range p.Partitions {
		add(ops.PauseTarget{Partition: pp.Partition}.String(), pp.Since)
	}
	return s
}
