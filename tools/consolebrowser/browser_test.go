package consolebrowser_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/moby/moby/api/types/container"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/phasepay/phasepay/internal/testutil/consoletest"
)

// The browser: one headless Chromium for the package's tests, a tab each.
// Debian's chromium where it is installed (scripts/install-chromium; make
// test and make chromium run it); where it is not, chromedp's published
// headless-shell image through testcontainers-go, where a Docker daemon is
// configured, as internal/testutil/testdb falls back to a PostgreSQL
// container.

var (
	browserOnce  sync.Once
	browserCtx   context.Context
	browserErr   error
	closeBrowser = func() {}
)

// chromium is Debian's package, installed by scripts/install-chromium.
const chromium = "/usr/bin/chromium"

// headlessShellImage is chromedp's image of Chrome's headless shell, the
// fallback where chromium is missing. Pinned: a browser that changes
// under the tests changes their screenshots.
const headlessShellImage = "docker.io/chromedp/headless-shell:136.0.7052.2"

// browserFlags are the flags of either browser.
var browserFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
	"--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars", "--window-size=1280,900"}

// startBrowser starts the package's browser once.
func startBrowser() error {
	browserOnce.Do(func() {
		var alloc context.Context
		var cancelAlloc context.CancelFunc
		if _, err := os.Stat(chromium); err == nil {
			alloc, cancelAlloc, browserErr = localBrowser()
		} else {
			alloc, cancelAlloc, browserErr = containerBrowser(err)
		}
		if browserErr != nil {
			return
		}
		var cancelBrowser context.CancelFunc
		browserCtx, cancelBrowser = chromedp.NewContext(alloc)
		closeBrowser = func() {
			cancelBrowser()
			cancelAlloc()
		}
		// Start the browser now, once, so that a test's deadline does not
		// include it.
		browserErr = chromedp.Do(browserCtx)
	})
	return browserErr
}

// localBrowser runs /usr/bin/chromium with a profile of its own.
func localBrowser() (context.Context, context.CancelFunc, error) {
	dir, err := os.MkdirTemp("", "phasepay-console-chromium-")
	if err != nil {
		return nil, nil, err
	}
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(chromium), chromedp.UserDataDir(dir)}
	for _, f := range browserFlags {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if hasValue {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	return alloc, func() { cancel(); _ = os.RemoveAll(dir) }, nil
}

// containerBrowser runs the headless shell in Docker, on the host's
// network: the consoles under test listen on 127.0.0.1, which a
// container on a network of its own cannot reach. Its debugging port is
// chosen by the browser (0) and read from the line it logs, so nothing
// else on the host is in its way. Host networking is Linux's; Docker
// Desktop has it only when enabled in its settings.
func containerBrowser(missing error) (context.Context, context.CancelFunc, error) {
	fail := func(err error) error {
		return fmt.Errorf("no browser for the console's tests: %s is missing (%w; as root, make chromium installs "+
			"Debian's), and the fallback, %s through testcontainers-go, did not start: %w",
			chromium, missing, headlessShellImage, err)
	}
	if os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat("/var/run/docker.sock"); err != nil {
			return nil, nil, fail(errors.New("no Docker daemon is configured (neither DOCKER_HOST nor /var/run/docker.sock)"))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := testcontainers.Run(ctx, headlessShellImage,
		testcontainers.WithEntrypoint("/headless-shell/headless-shell"),
		testcontainers.WithCmd(append([]string{"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0"}, browserFlags...)...),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.NetworkMode = "host" }),
		testcontainers.WithWaitStrategy(wait.ForLog("DevTools listening on").WithStartupTimeout(2*time.Minute)),
	)
	if err != nil {
		return nil, nil, fail(err)
	}
	ws, err := devtoolsURL(ctx, c)
	if err != nil {
		_ = c.Terminate(context.Background())
		return nil, nil, fail(err)
	}
	alloc, cancelAlloc := remote.NewAllocator(context.Background(), ws, remote.NoModifyURL)
	return alloc, func() { cancelAlloc(); _ = c.Terminate(context.Background()) }, nil
}

var devtoolsLine = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// devtoolsURL reads the browser's WebSocket address from its log.
func devtoolsURL(ctx context.Context, c testcontainers.Container) (string, error) {
	logs, err := c.Logs(ctx)
	if err != nil {
		return "", err
	}
	defer logs.Close()
	b, err := io.ReadAll(logs)
	if err != nil {
		return "", err
	}
	m := devtoolsLine.FindSubmatch(b)
	if m == nil {
		return "", errors.New("the headless shell logged no DevTools address")
	}
	return string(m[1]), nil
}

// tab opens a new tab of the shared browser, logged in to base, with a
// deadline for everything it does.
func tab(t *testing.T, base string) context.Context {
	t.Helper()
	require.NoError(t, startBrowser())
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(cancelT)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/login?token="+url.QueryEscape(consoletest.Token))))
	return ctx
}
