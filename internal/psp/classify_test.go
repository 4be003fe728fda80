package psp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClassifyPSPAnswers is the contract's table "PSP outcomes and how
// every request ends", row by row: one answer, one class.
func TestClassifyPSPAnswers(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		status int
		result string
		err    error
		want   Class
	}{
		{"Authorized", 200, StatusAuthorized, nil, ClassSuccess},
		{"Created", 201, StatusAuthorized, nil, ClassSuccess},
		{"Captured", 200, "captured", nil, ClassSuccess},
		{"Voided", 200, "voided", nil, ClassSuccess},
		{"Refunded", 200, "refunded", nil, ClassSuccess},
		{"RefundSucceeded", 200, "succeeded", nil, ClassSuccess},
		{"Declined", 200, StatusDeclined, nil, ClassFinalFailure},
		{"BadRequest", 400, "", nil, ClassFinalFailure},
		{"NotFound", 404, "", nil, ClassFinalFailure},
		{"KeyReusedWithOtherBody", 422, "", nil, ClassFinalFailure},
		{"Conflict", 409, "", nil, ClassBusy},
		{"TooManyRequests", 429, "", nil, ClassBusy},
		{"InternalServerError", 500, "", nil, ClassUnknown},
		{"BadGateway", 502, "", nil, ClassUnknown},
		{"ServiceUnavailable", 503, "", nil, ClassUnknown},
		{"GatewayTimeout", 504, "", nil, ClassUnknown},
		{"ConnectionRefused", 0, "", errors.New("dial tcp: connection refused"), ClassUnknown},
		{"Timeout", 0, "", context.DeadlineExceeded, ClassUnknown},
		{"AnswerLost", 0, "", io.ErrUnexpectedEOF, ClassUnknown},
		{"AnswerCutShort", 200, "", fmt.Errorf("read answer: %w", io.ErrUnexpectedEOF), ClassUnknown},
		{"MalformedBody", 200, "", fmt.Errorf("%w: not JSON", errMalformed), ClassUnknown},
		{"SuccessWithoutResult", 200, "", nil, ClassUnknown},
		{"PendingIsNotAResult", 200, "pending", nil, ClassUnknown},
		{"ErrorWinsOverStatus", 400, "", errors.New("read answer: reset"), ClassUnknown},
		{"Unauthorized", 401, "", nil, ClassUnknown},
		{"Forbidden", 403, "", nil, ClassUnknown},
		{"RequestTimeout", 408, "", nil, ClassUnknown},
		{"Redirect", 302, "", nil, ClassUnknown},
		{"NoAnswer", 0, "", nil, ClassUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Classify(tt.status, tt.result, tt.err))
		})
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "success", ClassSuccess.String())
	require.Equal(t, "final_failure", ClassFinalFailure.String())
	require.Equal(t, "busy", ClassBusy.String())
	require.Equal(t, "unknown", ClassUnknown.String())
	require.Equal(t, ClassUnknown, Outcome{}.Class, "an unfilled outcome is never an answer")
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"7", 7 * time.Second},
		{" 7 ", 7 * time.Second},
		{"99999999999999", 7 * 24 * time.Hour},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"soon", 0},
		{"1.5", 0},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, ParseRetryAfter(tt.in, now), "%q", tt.in)
	}
}
