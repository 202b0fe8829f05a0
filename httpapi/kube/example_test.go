package kube_test

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"

	"github.com/kvselect/kvselect/core"
	"github.com/kvselect/kvselect/httpapi/kube"
	"github.com/kvselect/kvselect/perf"
)

// Example wires discovery into a process: flags and environment, a
// reconciler that owns the catalog, metrics, Run until a signal, readiness
// from Ready. (Not run: it needs a cluster.)
func Example() {
	log := slog.Default()
	cfg := kube.DefaultConfig()
	fs := flag.NewFlagSet("epp", flag.ExitOnError)
	if err := kube.RegisterFlags(fs, os.LookupEnv, &cfg); err != nil {
		log.Error("discovery flags", "err", err)
		return
	}
	// A host without --model-name and --block-size of its own:
	if err := kube.RegisterWorkerFlags(fs, os.LookupEnv, &cfg); err != nil {
		log.Error("worker flags", "err", err)
		return
	}
	_ = fs.Parse(os.Args[1:])

	svc, err := core.New(core.DefaultConfig(), core.Options{})
	if err != nil {
		log.Error("service", "err", err)
		return
	}
	rec, err := core.NewCatalogReconciler(svc, core.ReconcilerConfig{Name: "kubernetes", Exclusive: true})
	if err != nil {
		log.Error("reconciler", "err", err)
		return
	}
	defer rec.Close()
	src, err := kube.New(cfg, rec, log)
	if err != nil {
		log.Error("discovery", "err", err)
		return
	}
	reg := perf.NewRegistry()
	src.RegisterMetrics(reg)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	// ... serve, answering readiness with src.Ready() ...
	<-ctx.Done()
	if err := <-done; err != nil {
		log.Error("discovery", "err", err)
	}
}
