// Command distsync shows the library at work.
//
//	go run ./cmd/distsync demo [flags]
//
// demo runs several simulated pods, each with its own rueidis client, contending on one
// distributed mutex, and reports acquisitions, hand-off latency, overlaps (there are none) and
// fencing tokens. It uses an embedded Redis unless --redis (or DISTSYNC_REDIS_URL) names one.
// Its keys live under a prefix of its own (distsync-demo:<random>:), and it deletes them all
// when it ends, also on an error or an interrupt, so it leaves nothing on a Redis of yours.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "distsync:", err)
		os.Exit(1)
	}
}

const usage = `usage: distsync demo [flags]

Commands:
  demo    simulated pods contend on one distributed mutex; prints what happened

Run "distsync demo -h" for the demo's flags.
`

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, usage)
		return nil
	}
	switch args[0] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.SetOutput(out)
		cfg := demoConfig{}
		fs.StringVar(&cfg.redisURL, "redis", os.Getenv("DISTSYNC_REDIS_URL"),
			"Redis URL or host:port, e.g. redis://127.0.0.1:6379 (default: $DISTSYNC_REDIS_URL, else an embedded Redis)")
		fs.IntVar(&cfg.pods, "pods", 4, "simulated pods, each with its own Redis client")
		fs.IntVar(&cfg.goroutines, "goroutines", 4, "goroutines per pod")
		fs.IntVar(&cfg.rounds, "rounds", 25, "Lock/Unlock rounds per goroutine")
		fs.DurationVar(&cfg.hold, "hold", time.Millisecond, "time spent inside the critical section")
		if err := fs.Parse(args[1:]); err != nil {
			if err == flag.ErrHelp {
				return nil
			}
			return err
		}
		if cfg.pods < 1 || cfg.goroutines < 1 || cfg.rounds < 1 || cfg.hold < 0 {
			return fmt.Errorf("demo: --pods, --goroutines and --rounds must be positive, --hold not negative")
		}
		return demo(ctx, cfg, out)
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}
