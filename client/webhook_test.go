package client_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/client"
)

// The test vector of docs/api.md.
const (
	vectorSecret = "whsec_test"
	vectorBody   = `{"id":"evt_1","object":"event"}`
	vectorHeader = "t=1700000000,v1=4c15fb2a43f93ef61eaa3e0893866d57cad9cad4223242cfb96f362480cb4021"
)

func at(unix int64) *client.VerifyOptions {
	return &client.VerifyOptions{Now: func() time.Time { return time.Unix(unix, 0) }}
}

func TestVerifyWebhookAcceptsTheTestVector(t *testing.T) {
	t.Parallel()
	ev, err := client.VerifyWebhook([]byte(vectorBody), vectorHeader, vectorSecret, at(1700000000+60))
	require.NoError(t, err)
	require.Equal(t, "evt_1", ev.ID)
	// Clock skew either way, within the tolerance.
	_, err = client.VerifyWebhook([]byte(vectorBody), vectorHeader, vectorSecret, at(1700000000-299))
	require.NoError(t, err)
	// A second v1 (a secret being changed) does not hide the good one.
	_, err = client.VerifyWebhook([]byte(vectorBody), "t=1700000000,v1="+strings.Repeat("0", 64)+","+vectorHeader[len("t=1700000000,"):], vectorSecret, at(1700000000))
	require.NoError(t, err)
}

// A delivery recorded and replayed later than the tolerance is refused,
// however valid its signature.
func TestVerifyWebhookRefusesReplayOfOldTimestamps(t *testing.T) {
	t.Parallel()
	_, err := client.VerifyWebhook([]byte(vectorBody), vectorHeader, vectorSecret, at(1700000000+301))
	require.ErrorIs(t, err, client.ErrWebhookTimestamp)
	_, err = client.VerifyWebhook([]byte(vectorBody), vectorHeader, vectorSecret, at(1700000000-301))
	require.ErrorIs(t, err, client.ErrWebhookTimestamp)
	_, err = client.VerifyWebhook([]byte(vectorBody), vectorHeader, vectorSecret,
		&client.VerifyOptions{Tolerance: time.Hour, Now: func() time.Time { return time.Unix(1700000000+3000, 0) }})
	require.NoError(t, err)
}

func TestVerifyWebhookRefusesTampering(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ body, header, secret string }{
		"body changed":          {`{"id":"evt_2","object":"event"}`, vectorHeader, vectorSecret},
		"timestamp changed":     {vectorBody, "t=1700000001" + vectorHeader[len("t=1700000000"):], vectorSecret},
		"other secret":          {vectorBody, vectorHeader, "whsec_other"},
		"secret without prefix": {vectorBody, vectorHeader, "test"},
		"no header":             {vectorBody, "", vectorSecret},
		"no v1":                 {vectorBody, "t=1700000000", vectorSecret},
		"v0 only":               {vectorBody, "t=1700000000,v0=" + vectorHeader[len("t=1700000000,v1="):], vectorSecret},
	} {
		_, err := client.VerifyWebhook([]byte(c.body), c.header, c.secret, at(1700000000))
		require.ErrorIs(t, err, client.ErrWebhookSignature, name)
	}
}

// A receiver whose secret variable is unset passes an empty secret: the
// HMAC with an empty key is anyone's to compute, so a forgery signed with
// it must not verify. Main accepted it.
func TestVerifyWebhookRefusesAnEmptySecret(t *testing.T) {
	t.Parallel()
	const body = `{"id":"evt_forged","object":"event"}`
	mac := hmac.New(sha256.New, nil)
	mac.Write([]byte("1700000000." + body))
	forged := "t=1700000000,v1=" + hex.EncodeToString(mac.Sum(nil))
	for _, secret := range []string{"", " ", "\n"} {
		_, err := client.VerifyWebhook([]byte(body), forged, secret, at(1700000000))
		require.ErrorIs(t, err, client.ErrWebhookSecretMissing, "%q", secret)
	}
}
