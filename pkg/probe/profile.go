package probe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// ProfileEnv names the environment variable behind a service's --profile-dir.
const ProfileEnv = "RECEIPTS_PROFILE_DIR"

// StartProfiles starts a CPU profile into dir/<base>.cpu.pprof and returns
// the function that stops it and writes the allocation profile
// dir/<base>.allocs.pprof (after a GC, so its in-use figures are live
// memory). Files of an earlier run under the same name are replaced. The
// returned function is safe to call once.
func StartProfiles(dir, base string) (stop func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profile dir: %w", err)
	}
	cpu, err := os.Create(filepath.Join(dir, base+".cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		errCPU := cpu.Close()
		runtime.GC()
		f, err := os.Create(filepath.Join(dir, base+".allocs.pprof"))
		if err != nil {
			return errors.Join(errCPU, fmt.Errorf("allocs profile: %w", err))
		}
		errW := pprof.Lookup("allocs").WriteTo(f, 0)
		return errors.Join(errCPU, errW, f.Close())
	}, nil
}
