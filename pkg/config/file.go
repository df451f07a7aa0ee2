package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/receiptflow/receiptflow/pkg/wire"
)

// ParamsFile is the file beside a run's artifacts that records the run's
// parameters, so that reconcile of the artifacts needs no flags.
const ParamsFile = "params.json"

// WriteParams writes p of generation gen to dir/ParamsFile as one JSON
// object: "generation" and each parameter under its flag's name.
func WriteParams(dir, gen string, p Params) error {
	m := map[string]string{"generation": wire.For(gen).Generation}
	for _, f := range params {
		m[f.flag] = f.show(p)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ParamsFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("config: write %s: %w", ParamsFile, err)
	}
	return nil
}

// ReadParams reads a file WriteParams wrote and returns it in the form
// RAW's metadata has (for Params.Adopt) with its generation. A missing
// file returns nil metadata and no error.
func ReadParams(path string) (map[string]string, string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, "", fmt.Errorf("config: %s: %w", path, err)
	}
	n := wire.For(m["generation"])
	meta := map[string]string{}
	for _, f := range params {
		if v, ok := m[f.flag]; ok {
			meta[n.ParamKey(f.flag)] = v
		}
	}
	return meta, n.Generation, nil
}
