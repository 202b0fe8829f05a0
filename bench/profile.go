package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// captureProfiles fetches from the server's pprof base, concurrently, a CPU profile and delta mutex and block profiles
// over the measured window (net/http/pprof's ?seconds=), and a heap profile
// at its end, into dir as cpu.pprof, mutex.pprof, block.pprof and heap.pprof.
// Mutex and block profiles are empty unless the server enabled their rates
// (runtime.SetMutexProfileFraction, SetBlockProfileRate). It returns the
// files written and a warning per profile that could not be fetched.
func captureProfiles(ctx context.Context, base, dir string, window time.Duration) (files, warnings []string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, []string{fmt.Sprintf("profiles: %v", err)}
	}
	secs := max(1, int(window/time.Second))
	client := &http.Client{Timeout: time.Duration(secs)*time.Second + 30*time.Second}
	var mu sync.Mutex
	var wg sync.WaitGroup
	fetch := func(name, query string, wait time.Duration) {
		defer wg.Done()
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		path, err := fetchProfile(ctx, client, base+"/"+query, filepath.Join(dir, name+".pprof"))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("profile %s: %v", name, err))
			return
		}
		files = append(files, path)
	}
	wg.Add(4)
	go fetch("cpu", fmt.Sprintf("profile?seconds=%d", secs), 0)
	go fetch("mutex", fmt.Sprintf("mutex?seconds=%d", secs), 0)
	go fetch("block", fmt.Sprintf("block?seconds=%d", secs), 0)
	go fetch("heap", "heap", window)
	wg.Wait()
	return files, warnings
}

func fetchProfile(ctx context.Context, client *http.Client, url, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return "", fmt.Errorf("GET %s: status %d: %s", url, resp.StatusCode, clip(b))
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// baselineProfile returns an atMeasureStart hook that starts a CPU
// profile of this process into dir/noop-cpu.pprof, and a stop that ends
// it and returns the file or a warning. The baseline runs in this process,
// with the client, so its profile and the selector's cpu.pprof (also of
// this process when the selector is in-process) cover the same client
// work: their difference is the selector's (perf/RESULTS.md, issue 26).
func baselineProfile(dir string) (start func(), stop func() (file, warning string)) {
	var f *os.File
	var startErr error
	start = func() {
		if startErr = os.MkdirAll(dir, 0o755); startErr != nil {
			return
		}
		if f, startErr = os.Create(filepath.Join(dir, "noop-cpu.pprof")); startErr != nil {
			return
		}
		if startErr = pprof.StartCPUProfile(f); startErr != nil {
			_ = f.Close()
			f = nil
		}
	}
	stop = func() (string, string) {
		if f == nil {
			if startErr != nil {
				return "", fmt.Sprintf("profile noop-cpu: %v", startErr)
			}
			return "", ""
		}
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return "", fmt.Sprintf("profile noop-cpu: %v", err)
		}
		return f.Name(), ""
	}
	return start, stop
}

// addProfile records a profile file and a warning, each when not empty.
func (r *Report) addProfile(file, warning string) {
	if file != "" {
		r.Profiles = append(r.Profiles, file)
	}
	if warning != "" {
		r.Warnings = append(r.Warnings, warning)
	}
}
