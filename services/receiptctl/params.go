package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/receiptflow/receiptflow/pkg/config"
	"github.com/receiptflow/receiptflow/pkg/connect"
	"github.com/receiptflow/receiptflow/pkg/generation"
)

// deploymentRecord reads a running deployment's recorded parameters (RAW's
// stream metadata) and its active generation.
func deploymentRecord(ctx context.Context, url string, sec connect.NATSSecurity) (map[string]string, string, error) {
	conn, refusals, err := connectOperator(url, "receiptctl-params", sec)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	meta, err := config.Recorded(ctx, conn.JS)
	if err != nil {
		return nil, "", explainRefusal(fmt.Errorf("the deployment's parameters: %w", err), refusals, sec)
	}
	active, _, err := generation.Active(ctx, conn.JS)
	if err != nil && meta != nil {
		return nil, "", explainRefusal(err, refusals, sec)
	}
	return meta, active.Generation, nil
}

// adoptParams takes gen's parameters from meta into p (config.Params.Adopt):
// a flag of fs not given takes the recorded value, one given with another
// value is a usage error naming both.
func adoptParams(p *config.Params, fs *flag.FlagSet, meta map[string]string, gen string) error {
	if _, err := p.Adopt(meta, gen, config.Explicit(fs)); err != nil {
		if errors.Is(err, config.ErrDisagrees) {
			return usageError("%v", err)
		}
		return err
	}
	if err := p.Validate(); err != nil {
		return usageError("%v", err)
	}
	return nil
}

// reconcileParams sets the parameters reconcile judges with: those of the
// run whose windows.json it compares with (its params.json), else those a
// deployment recorded for generation gen (default the active one) when
// natsURL is set, else the flags and config.Defaults.
func reconcileParams(ctx context.Context, p *config.Params, fs *flag.FlagSet, windows, natsURL, gen string, sec connect.NATSSecurity) error {
	if windows != "" {
		meta, runGen, err := config.ReadParams(filepath.Join(filepath.Dir(windows), config.ParamsFile))
		if err != nil {
			return err
		}
		if meta != nil {
			return adoptParams(p, fs, meta, runGen)
		}
	}
	if natsURL == "" {
		return adoptParams(p, fs, nil, gen)
	}
	meta, active, err := deploymentRecord(ctx, natsURL, sec)
	if err != nil {
		return err
	}
	if gen == "" {
		gen = active
	}
	return adoptParams(p, fs, meta, gen)
}
