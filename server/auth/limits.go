package auth

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/cache"
)

// buckets holds a token bucket per key (an identity, a client address),
// made on first use and forgotten once idle for idle: by then it would have
// refilled anyway. At most 100,000 keys are held, the least recently used
// going first.
type buckets[T any] struct {
	idle     time.Duration
	newValue func() T

	mu    sync.Mutex            // guards get-or-create in cache
	cache *cache.LRUExpireCache // key -> T
}

func newBuckets[T any](idle time.Duration, newValue func() T) *buckets[T] {
	return &buckets[T]{idle: idle, newValue: newValue, cache: cache.NewLRUExpireCache(100000)}
}

// get returns the bucket of key, and keeps it for idle more.
func (b *buckets[T]) get(key string) T {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.cache.Get(key)
	if !ok {
		v = b.newValue()
	}
	b.cache.Add(key, v, b.idle)
	return v.(T)
}

// RateLimiter limits the calls of each identity with a token bucket. It is
// a go-grpc-middleware ratelimit.Limiter; put it after authentication.
type RateLimiter struct {
	limit    rate.Limit
	burst    int
	limiters *buckets[*rate.Limiter] // by user name
}

// NewRateLimiter allows each identity perSecond calls on average, and burst
// at once.
func NewRateLimiter(perSecond float64, burst int) *RateLimiter {
	l := &RateLimiter{limit: rate.Limit(perSecond), burst: burst}
	l.limiters = newBuckets(10*time.Minute, func() *rate.Limiter { return rate.NewLimiter(l.limit, l.burst) })
	return l
}

// Limit implements ratelimit.Limiter.
func (l *RateLimiter) Limit(ctx context.Context) error {
	user, _ := UserFrom(ctx)
	if !l.limiters.get(user.Name).Allow() {
		return fmt.Errorf("%q made more than %g calls per second (burst %d)", user.Name, float64(l.limit), l.burst)
	}
	return nil
}

// LimitN charges n more calls of ctx's identity at once (the watches of a
// WatchMany beyond its call), or fails as Limit does when they do not fit.
func (l *RateLimiter) LimitN(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	user, _ := UserFrom(ctx)
	if !l.limiters.get(user.Name).AllowN(time.Now(), n) {
		return fmt.Errorf("%q made more than %g calls per second (burst %d), counting each watch of a WatchMany as one", user.Name, float64(l.limit), l.burst)
	}
	return nil
}

// SubscriptionLimiter bounds the streams (Watch and Snapshot) each identity
// has open at once, and all identities together.
type SubscriptionLimiter struct {
	max, maxTotal int

	mu    sync.Mutex // guards open and total
	open  map[string]int
	total int
}

// NewSubscriptionLimiter allows each identity max open streams, and all of
// them maxTotal.
func NewSubscriptionLimiter(max, maxTotal int) *SubscriptionLimiter {
	return &SubscriptionLimiter{max: max, maxTotal: maxTotal, open: map[string]int{}}
}

// TooManySubscriptionsError says that an identity has as many streams open
// as it may, or (User empty) that the server has as many as it takes.
type TooManySubscriptionsError struct {
	User string
	Max  int
}

func (e *TooManySubscriptionsError) Error() string {
	if e.User == "" {
		return fmt.Sprintf("this hub has %d streams open, the most it takes: retry with backoff, on another replica if there is one", e.Max)
	}
	return fmt.Sprintf("%q has %d streams open, the most it may: close one first", e.User, e.Max)
}

// Acquire counts a new stream of user, or fails with a
// *TooManySubscriptionsError. Every successful Acquire needs a Release.
func (l *SubscriptionLimiter) Acquire(user string) error { return l.AcquireN(user, 1) }

// AcquireN counts n new streams of user, all or none (the watches of one
// WatchMany). Every successful AcquireN needs a ReleaseN of the same n.
func (l *SubscriptionLimiter) AcquireN(user string, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[user]+n > l.max {
		return &TooManySubscriptionsError{User: user, Max: l.max}
	}
	if l.total+n > l.maxTotal {
		return &TooManySubscriptionsError{Max: l.maxTotal}
	}
	l.open[user] += n
	l.total += n
	return nil
}

// Release uncounts a stream of user.
func (l *SubscriptionLimiter) Release(user string) { l.ReleaseN(user, 1) }

// ReleaseN uncounts n streams of user.
func (l *SubscriptionLimiter) ReleaseN(user string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total -= n
	if l.open[user] -= n; l.open[user] <= 0 {
		delete(l.open, user)
	}
}
