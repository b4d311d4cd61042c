package crowdsec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xdp-drop/xdp_drop/internal/crowdsec"
)

// standIn is a LAPI stand-in: it logs any machine in and answers each
// alert's post as answer says for the alert's message.
type standIn struct {
	URL    string
	srv    *httptest.Server
	answer func(r *http.Request, message string) int
	mu     sync.Mutex
	posts  []string // the posted alerts' messages, in order
	logins int
}

func newStandIn(t *testing.T, answer func(r *http.Request, message string) int) *standIn {
	s := &standIn{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/watchers/login":
			s.mu.Lock()
			s.logins++
			s.mu.Unlock()
			if code := s.answer(r, "login"); code != http.StatusOK {
				w.WriteHeader(code)
				return
			}
			_, _ = w.Write([]byte(`{"code":200,"token":"t"}`))
		case "/v1/alerts":
			var alerts []struct{ Message string }
			if err := json.NewDecoder(r.Body).Decode(&alerts); err != nil || len(alerts) != 1 {
				w.WriteHeader(http.StatusUnprocessableEntity)
				return
			}
			s.mu.Lock()
			s.posts = append(s.posts, alerts[0].Message)
			s.mu.Unlock()
			code := s.answer(r, alerts[0].Message)
			w.WriteHeader(code)
			if code == http.StatusCreated {
				_, _ = w.Write([]byte(`["1"]`))
			} else {
				_, _ = w.Write([]byte(`{"message":"refused by the stand-in"}`))
			}
		}
	}))
	t.Cleanup(srv.Close)
	s.URL, s.srv = srv.URL, srv
	return s
}

// created answers every post 201 and every login 200.
func created(_ *http.Request, message string) int {
	if message == "login" {
		return http.StatusOK
	}
	return http.StatusCreated
}

func (s *standIn) posted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.posts...)
}

func (s *standIn) pusher(t *testing.T) *crowdsec.Pusher {
	p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: s.URL, Login: "m", Password: "p"})
	require.NoError(t, err)
	return p
}

// clock is a queue's clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// givenUp records what OnGiveUp is told, in order.
type givenUp struct {
	mu   sync.Mutex
	bans []crowdsec.Ban
	errs []error
}

func (g *givenUp) add(b crowdsec.Ban, err error) {
	g.mu.Lock()
	g.bans = append(g.bans, b)
	g.errs = append(g.errs, err)
	g.mu.Unlock()
}

// wait waits (at most 10 s) for n reports and returns them: the counts
// in Stats come before OnGiveUp is called.
func (g *givenUp) wait(t *testing.T, n int) ([]crowdsec.Ban, []error) {
	t.Helper()
	require.Eventually(t, func() bool { return len(g.messages()) >= n }, 10*time.Second, time.Millisecond, "%d reports", n)
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Len(t, g.bans, n)
	return append([]crowdsec.Ban(nil), g.bans...), append([]error(nil), g.errs...)
}

func (g *givenUp) messages() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var m []string
	for _, b := range g.bans {
		m = append(m, b.Message)
	}
	return m
}

// run runs q until the returned stop, which fails the test unless Run
// returns once its context ends.
func run(t *testing.T, q *crowdsec.PushQueue) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return 10 s after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// ban is a ban of 192.0.2.n from at, with message.
func ban(n int, at time.Time, d time.Duration, message string) crowdsec.Ban {
	return crowdsec.Ban{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(n)}), 32), Start: at, Duration: d, Message: message}
}

// eventually waits (at most 10 s) for q's stats to be want.
func eventually(t *testing.T, q *crowdsec.PushQueue, want func(crowdsec.PushStats) bool, what string) {
	t.Helper()
	require.Eventually(t, func() bool { return want(q.Stats()) }, 10*time.Second, time.Millisecond, "%s; stats %+v", what, q.Stats())
}

// TestPushQueueRetries: posts that fail are retried until the LAPI takes
// the ban, each failure counted; a full queue drops and counts.
func TestPushQueueRetries(t *testing.T) {
	fails := 2
	s := newStandIn(t, func(r *http.Request, m string) int {
		if m != "login" && fails > 0 {
			fails--
			return http.StatusInternalServerError
		}
		return created(r, m)
	})
	q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{Size: 1, MinRetry: time.Millisecond, MaxRetry: 10 * time.Millisecond, PerMinute: 10})
	require.NoError(t, err)
	b := ban(1, time.Now(), time.Hour, "retried")
	require.True(t, q.Offer(b))
	require.False(t, q.Offer(b), "the queue holds one")
	stop := run(t, q)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed == 1 }, "pushed after two failures")
	stop()
	require.Equal(t, crowdsec.PushStats{Pushed: 1, Failed: 2, Dropped: 1}, q.Stats())
	require.Equal(t, []string{"retried", "retried", "retried"}, s.posted())
}

// TestPushQueueRefusedBanDoesNotBlock: the LAPI answers 400 to one ban's
// alert; the 8 bans offered after it are all posted, once each, before
// the queue's clock has moved (before its first retry is due); it is
// posted 3 times in all, then given up and reported with the LAPI's
// answer.
func TestPushQueueRefusedBanDoesNotBlock(t *testing.T) {
	s := newStandIn(t, func(r *http.Request, m string) int {
		if strings.HasPrefix(m, "refuse") {
			return http.StatusBadRequest
		}
		return created(r, m)
	})
	c := newClock()
	var g givenUp
	q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{
		Size: 100, MinRetry: 100 * time.Millisecond, MaxRetry: 200 * time.Millisecond, PerMinute: 100, Now: c.Now, OnGiveUp: g.add,
	})
	require.NoError(t, err)
	refused := ban(200, c.Now(), time.Hour, "refuse me")
	require.True(t, q.Offer(refused))
	want := []string{"refuse me"}
	for i := 1; i <= 8; i++ {
		m := fmt.Sprintf("ban %d", i)
		require.True(t, q.Offer(ban(i, c.Now(), time.Hour, m)))
		want = append(want, m)
	}
	run(t, q)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed == 8 }, "the 8 others pushed with the clock still")
	require.Equal(t, want, s.posted(), "each of the 8 posted once, after the refused one's first post")
	require.Equal(t, crowdsec.PushStats{Pushed: 8, Failed: 1, Waiting: 1}, q.Stats(), "the successes after the refusal cleared Error")

	c.Add(200 * time.Millisecond) // the first retry interval (100 ms, less jitter) has passed
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Failed == 2 }, "the second post")
	require.Equal(t, int64(1), q.Stats().Waiting)
	require.Empty(t, g.messages())

	c.Add(200 * time.Millisecond) // and the second (200 ms, less jitter)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.GivenUp == 1 }, "given up after the third post")
	require.Equal(t, append(want, "refuse me", "refuse me"), s.posted())
	st := q.Stats()
	require.Contains(t, st.Error, "HTTP 400 Bad Request")
	st.Error = ""
	require.Equal(t, crowdsec.PushStats{Pushed: 8, Failed: 3, Dropped: 1, GivenUp: 1}, st)

	bans, errs := g.wait(t, 1)
	require.Equal(t, []crowdsec.Ban{refused}, bans)
	var ae *crowdsec.AlertError
	require.ErrorAs(t, errs[0], &ae)
	require.Equal(t, http.StatusBadRequest, ae.Status)
	require.True(t, strings.HasPrefix(errs[0].Error(), "refused 3 times: crowdsec LAPI "), errs[0].Error())
	require.Contains(t, errs[0].Error(), "HTTP 400 Bad Request")
}

// TestPushQueueServerErrorRetriedUntilTheBanEnds: a 5xx is not a
// refusal: the ban is posted past RefusedTries until it ends, then given
// up with ErrBanEnded and the last answer.
func TestPushQueueServerErrorRetriedUntilTheBanEnds(t *testing.T) {
	s := newStandIn(t, func(r *http.Request, m string) int {
		if m == "login" {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	c := newClock()
	var g givenUp
	q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{
		Size: 10, MinRetry: 50 * time.Millisecond, MaxRetry: 50 * time.Millisecond, PerMinute: 10, Now: c.Now, OnGiveUp: g.add,
	})
	require.NoError(t, err)
	b := ban(1, c.Now(), time.Second, "busy")
	require.True(t, q.Offer(b))
	run(t, q)
	for n := int64(1); n <= 5; n++ {
		eventually(t, q, func(s crowdsec.PushStats) bool { return s.Failed == n }, fmt.Sprintf("post %d", n))
		require.Equal(t, int64(1), q.Stats().Waiting, "still retried after %d posts", n)
		if n < 5 {
			c.Add(50 * time.Millisecond) // the next post is due
		}
	}
	c.Add(time.Second) // the ban has ended before the 6th
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.GivenUp == 1 }, "given up when the ban ended")
	st := q.Stats()
	require.Contains(t, st.Error, "HTTP 503 Service Unavailable")
	st.Error = ""
	require.Equal(t, crowdsec.PushStats{Failed: 5, Dropped: 1, GivenUp: 1}, st)
	require.Len(t, s.posted(), 5)
	bans, errs := g.wait(t, 1)
	require.Equal(t, []crowdsec.Ban{b}, bans)
	require.ErrorIs(t, errs[0], crowdsec.ErrBanEnded)
	var ae *crowdsec.AlertError
	require.ErrorAs(t, errs[0], &ae)
	require.Equal(t, http.StatusServiceUnavailable, ae.Status)
	require.Contains(t, errs[0].Error(), "after 5 posts")
}

// TestPushQueueLAPIDownHoldsEveryPost: a failure that is not the answer
// to an alert (here the login answered 503) holds every ban, so a LAPI
// that is down is tried once per retry interval, not once per ban.
func TestPushQueueLAPIDownHoldsEveryPost(t *testing.T) {
	var mu sync.Mutex
	down := true
	s := newStandIn(t, func(r *http.Request, m string) int {
		mu.Lock()
		defer mu.Unlock()
		if down && m == "login" {
			return http.StatusServiceUnavailable
		}
		return created(r, m)
	})
	c := newClock()
	q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{
		Size: 10, MinRetry: 50 * time.Millisecond, MaxRetry: 50 * time.Millisecond, PerMinute: 10, Now: c.Now,
	})
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		require.True(t, q.Offer(ban(i, c.Now(), time.Hour, fmt.Sprintf("ban %d", i))))
	}
	run(t, q)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Failed == 1 }, "the first try")
	time.Sleep(300 * time.Millisecond) // Run wakes about 6 times in it; the held clock allows no post
	require.Equal(t, int64(1), q.Stats().Failed)
	s.mu.Lock()
	require.Equal(t, 1, s.logins)
	s.mu.Unlock()

	mu.Lock()
	down = false
	mu.Unlock()
	c.Add(50 * time.Millisecond)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed == 3 }, "all three once the LAPI is back")
	require.Equal(t, []string{"ban 1", "ban 2", "ban 3"}, s.posted())
	require.Equal(t, crowdsec.PushStats{Pushed: 3, Failed: 1}, q.Stats())
}

// TestPushQueueBudget: 15 bans in a burst with a budget of 10: the first
// 10 are posted, the other 5 reported over budget; room comes back as
// the posts leave the 60 s window, and not before.
func TestPushQueueBudget(t *testing.T) {
	s := newStandIn(t, created)
	c := newClock()
	t0 := c.Now()
	var g givenUp
	q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{Size: 100, PerMinute: 10, Now: c.Now, OnGiveUp: g.add})
	require.NoError(t, err)
	var want, over []string
	for i := 0; i < 15; i++ {
		m := fmt.Sprintf("ban %d", i)
		require.True(t, q.Offer(ban(i, t0, time.Hour, m)))
		if i < 10 {
			want = append(want, m)
		} else {
			over = append(over, m)
		}
	}
	run(t, q)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed+s.Dropped == 15 }, "all 15 settled")
	require.Equal(t, crowdsec.PushStats{Pushed: 10, Dropped: 5, OverBudget: 5}, q.Stats())
	require.Equal(t, want, s.posted())
	_, errs := g.wait(t, 5)
	require.Equal(t, over, g.messages())
	for _, err := range errs {
		require.ErrorIs(t, err, crowdsec.ErrPushBudget)
	}
	require.Contains(t, errs[0].Error(), "push budget is spent")
	require.Equal(t, []time.Time{t0, t0, t0, t0, t0, t0, t0, t0, t0, t0}, q.Spent())

	c.Add(59 * time.Second)
	require.True(t, q.Offer(ban(15, c.Now(), time.Hour, "ban 15")))
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.OverBudget == 6 }, "still spent at 59 s")
	require.Len(t, s.posted(), 10)

	c.Add(time.Second)
	require.Empty(t, q.Spent(), "the 10 posts left the window at 60 s")
	require.True(t, q.Offer(ban(16, c.Now(), time.Hour, "ban 16")))
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed == 11 }, "room again at 60 s")
	require.Equal(t, append(want, "ban 16"), s.posted())
	require.Equal(t, crowdsec.PushStats{Pushed: 11, Dropped: 6, OverBudget: 6}, q.Stats())
	require.Equal(t, []time.Time{c.Now()}, q.Spent())
}

// TestPushQueueBudgetSeeded: a queue given a predecessor's 10 pushes of
// 30 s ago posts nothing until they leave the window; times older than
// the window are ignored.
func TestPushQueueBudgetSeeded(t *testing.T) {
	s := newStandIn(t, created)
	c := newClock()
	t0 := c.Now()
	before := t0.Add(-30 * time.Second)
	spent := []time.Time{t0.Add(-61 * time.Second), t0.Add(-60 * time.Second)}
	for i := 0; i < 10; i++ {
		spent = append(spent, before)
	}
	var g givenUp
	q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{Size: 100, PerMinute: 10, Spent: spent, Now: c.Now, OnGiveUp: g.add})
	require.NoError(t, err)
	require.Len(t, q.Spent(), 10)
	require.Equal(t, before, q.Spent()[0])
	for i := 0; i < 3; i++ {
		require.True(t, q.Offer(ban(i, t0, time.Hour, fmt.Sprintf("now %d", i))))
	}
	run(t, q)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Dropped == 3 }, "the 3 over budget")
	require.Equal(t, crowdsec.PushStats{Dropped: 3, OverBudget: 3}, q.Stats())
	require.Empty(t, s.posted())
	g.wait(t, 3)
	require.Equal(t, []string{"now 0", "now 1", "now 2"}, g.messages())

	c.Add(30 * time.Second)
	require.True(t, q.Offer(ban(3, c.Now(), time.Hour, "later 3")))
	require.True(t, q.Offer(ban(4, c.Now(), time.Hour, "later 4")))
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed == 2 }, "posted once the seeded times left the window")
	require.Equal(t, []string{"later 3", "later 4"}, s.posted())
	require.Equal(t, crowdsec.PushStats{Pushed: 2, Dropped: 3, OverBudget: 3}, q.Stats())
	require.Equal(t, []time.Time{c.Now(), c.Now()}, q.Spent())
}

// TestPushQueueRetryNotChargedAgain: a ban's retries do not spend the
// budget; only its first post did.
func TestPushQueueRetryNotChargedAgain(t *testing.T) {
	fails := 1
	s := newStandIn(t, func(r *http.Request, m string) int {
		if m == "flaky" && fails > 0 {
			fails--
			return http.StatusBadGateway
		}
		return created(r, m)
	})
	c := newClock()
	t0 := c.Now()
	q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{Size: 10, MinRetry: 50 * time.Millisecond, MaxRetry: 50 * time.Millisecond, PerMinute: 2, Now: c.Now})
	require.NoError(t, err)
	require.True(t, q.Offer(ban(1, t0, time.Hour, "flaky")))
	require.True(t, q.Offer(ban(2, t0, time.Hour, "steady")))
	run(t, q)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed == 1 && s.Failed == 1 }, "steady pushed, flaky parked")
	c.Add(50 * time.Millisecond)
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.Pushed == 2 }, "flaky's retry")
	require.Equal(t, []string{"flaky", "steady", "flaky"}, s.posted())
	require.Equal(t, []time.Time{t0, t0}, q.Spent(), "two first posts, the retry not charged")
	require.True(t, q.Offer(ban(3, c.Now(), time.Hour, "third")))
	eventually(t, q, func(s crowdsec.PushStats) bool { return s.OverBudget == 1 }, "the third over budget")
	require.Equal(t, crowdsec.PushStats{Pushed: 2, Failed: 1, Dropped: 1, OverBudget: 1}, q.Stats())
}

func TestNewPushQueueRejects(t *testing.T) {
	p, err := crowdsec.NewPusher(crowdsec.PushConfig{URL: "http://127.0.0.1:1/", Login: "m", Password: "p"})
	require.NoError(t, err)
	_, err = crowdsec.NewPushQueue(p, crowdsec.PushQueueConfig{Size: 10})
	require.EqualError(t, err, "max_pushes_per_minute 0: must be at least 1 (the push budget is always on)")
	_, err = crowdsec.NewPushQueue(p, crowdsec.PushQueueConfig{Size: 10, PerMinute: -1})
	require.EqualError(t, err, "max_pushes_per_minute -1: must be at least 1 (the push budget is always on)")
	_, err = crowdsec.NewPushQueue(p, crowdsec.PushQueueConfig{PerMinute: 10})
	require.EqualError(t, err, "crowdsec push queue: size 0: must be at least 1")
}

// TestPushQueueRunEndsWithItsContext: Run returns when its context ends,
// a post in flight or bans parked, leaves them queued and leaks no
// goroutine.
func TestPushQueueRunEndsWithItsContext(t *testing.T) {
	base := runtime.NumGoroutine()
	inFlight := make(chan struct{}, 1)
	func() {
		s := newStandIn(t, func(r *http.Request, m string) int {
			switch m {
			case "hang":
				inFlight <- struct{}{}
				<-r.Context().Done()
				return http.StatusServiceUnavailable
			case "refuse":
				return http.StatusBadRequest
			}
			return created(r, m)
		})
		q, err := crowdsec.NewPushQueue(s.pusher(t), crowdsec.PushQueueConfig{Size: 10, MinRetry: time.Hour, MaxRetry: time.Hour, PerMinute: 10})
		require.NoError(t, err)

		require.True(t, q.Offer(ban(1, time.Now(), 2*time.Hour, "refuse")))
		stop := run(t, q)
		eventually(t, q, func(s crowdsec.PushStats) bool { return s.Failed == 1 }, "refused once, parked for an hour")
		stop() // Run waits for the parked ban
		require.Equal(t, int64(1), q.Stats().Waiting)

		stop = run(t, q)
		require.True(t, q.Offer(ban(2, time.Now(), 2*time.Hour, "hang")))
		<-inFlight
		stop() // Run is in the post
		st := q.Stats()
		st.Error = ""
		require.Equal(t, crowdsec.PushStats{Failed: 1, Waiting: 2}, st, "the cut post is not counted; both bans stay queued")
		require.Equal(t, []string{"refuse", "hang"}, s.posted())
		s.srv.Close() // and with it the Pusher's connections
	}()
	// Polled here: Eventually runs its condition in a goroutine of its own.
	for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines 10 s after Run returned, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
	}
}
