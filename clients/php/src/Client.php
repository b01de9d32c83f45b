<?php

declare(strict_types=1);

namespace Leitstand;

/**
 * The Leitstand REST API v1 over curl.
 *
 *     $leitstand = new Leitstand\Client('https://leitstand.example', getenv('LEITSTAND_TOKEN'));
 *     $job = $leitstand->submitJob('crawl', ['url' => 'https://site.example/'], 'order-4711');
 *     $job = $leitstand->waitForJob($job['id'], ['done', 'dead', 'cancelled', 'ready_for_review']);
 *
 * With the option `trace_context` (a function returning the caller's W3C trace context as headers,
 * e.g. OpenTelemetry's `TraceContextPropagator::getInstance()->inject($carrier)` into an array) every
 * request carries `traceparent` and `tracestate`: a job keeps the trace it was submitted in
 * (`trace_id` in its record), and the answer's `traceresponse` is in `$lastTraceResponse`.
 *
 * Reads, submissions and moves are retried on network errors, 429 (after Retry-After) and
 * 502/503/504, with exponential backoff. That is safe: a job submission carries its idempotency key,
 * so a retry of a submission that did arrive answers 200 with the same job instead of creating a
 * second one. Cancel, hold, resume and a plan's decision are retried only after a 429 (the server
 * did nothing): after a lost answer or a 502–504 they may have been applied, and the client says so
 * (`NetworkError`) instead of sending them again and reporting a 409 for what succeeded.
 */
final class Client
{
    private string $baseUrl;
    private string $token;
    private int $maxAttempts;
    private float $backoffSeconds;
    private float $maxBackoffSeconds;
    private int $timeoutSeconds;
    private int $connectTimeoutSeconds;
    /** @var callable(float): void */
    private $sleep;
    /** The X-Correlation-ID of the last answer. */
    public ?string $lastCorrelationId = null;
    /** How many attempts the last request took. */
    public int $lastAttempts = 0;
    /** The `traceresponse` of the last answer: the trace the request ran in, if any. */
    public ?string $lastTraceResponse = null;
    /** @var (callable(): array<string, string>)|null */
    private $traceContext;

    /**
     * @param array{max_attempts?: int, backoff_seconds?: float, max_backoff_seconds?: float,
     *              timeout_seconds?: int, connect_timeout_seconds?: int, sleep?: callable(float): void,
     *              trace_context?: callable(): array<string, string>} $options
     */
    public function __construct(string $baseUrl, string $token, array $options = [])
    {
        if (!extension_loaded('curl')) {
            throw new \LogicException('the Leitstand client needs the curl extension (Debian: php-curl)');
        }
        $this->baseUrl = rtrim($baseUrl, '/');
        $this->token = $token;
        $this->maxAttempts = max(1, (int) ($options['max_attempts'] ?? 5));
        $this->backoffSeconds = (float) ($options['backoff_seconds'] ?? 0.5);
        $this->maxBackoffSeconds = (float) ($options['max_backoff_seconds'] ?? 30.0);
        $this->timeoutSeconds = (int) ($options['timeout_seconds'] ?? 30);
        $this->connectTimeoutSeconds = (int) ($options['connect_timeout_seconds'] ?? 5);
        $this->sleep = $options['sleep'] ?? static function (float $seconds): void {
            usleep((int) ($seconds * 1e6));
        };
        $this->traceContext = $options['trace_context'] ?? null;
    }

    /**
     * Submit a job. Give every business action its own stable idempotency key (e.g. "order-4711"):
     * submitting it again returns the same job (`created` false) instead of a second one.
     *
     * @param array<string, mixed> $payload
     * @param array{priority?: int, correlation_id?: string, source?: string, due_at?: string} $options
     * @return array<string, mixed> the job record, with `created` (true: 201, false: 200)
     */
    public function submitJob(string $type, array $payload, string $idempotencyKey, array $options = []): array
    {
        $body = ['type' => $type, 'payload' => $payload === [] ? new \stdClass() : $payload,
                 'idempotency_key' => $idempotencyKey] + $options;
        [$status, $job] = $this->request('POST', '/api/v1/jobs', $body, $options['correlation_id'] ?? null);
        $job['created'] = $status === 201;
        return $job;
    }

    /**
     * @param bool $withLogs also the log lines each attempt kept (`logs`: oldest attempt first)
     * @return array<string, mixed> the job record with its transitions, findings and recheck plan
     */
    public function getJob(string $jobId, bool $withLogs = false): array
    {
        $path = '/api/v1/jobs/' . rawurlencode($jobId) . ($withLogs ? '?include=logs' : '');
        return $this->request('GET', $path)[1];
    }

    /**
     * One page of jobs; pass the page's `next_cursor` as `cursor` for the next (null on the last).
     *
     * @param array{correlation_id?: string, type?: string, state?: string, updated_after?: string,
     *              cursor?: string, limit?: int} $filters
     * @return array{items: list<array<string, mixed>>, next_cursor: ?string}
     */
    public function listJobs(array $filters = []): array
    {
        $query = $filters === [] ? '' : '?' . http_build_query($filters, '', '&', PHP_QUERY_RFC3986);
        return $this->request('GET', '/api/v1/jobs' . $query)[1];
    }

    /**
     * Every job matching the filters, page after page.
     *
     * @param array<string, mixed> $filters
     * @return \Generator<int, array<string, mixed>>
     */
    public function eachJob(array $filters = []): \Generator
    {
        do {
            $page = $this->listJobs($filters);
            yield from $page['items'];
            $filters['cursor'] = $page['next_cursor'];
        } while ($page['next_cursor'] !== null);
    }

    /**
     * Poll until the job is in one of `$states` (or the time is up: the last record is returned).
     *
     * @param list<string> $states
     * @return array<string, mixed>
     */
    public function waitForJob(string $jobId, array $states = ['done', 'dead', 'cancelled', 'ready_for_review'],
                               float $timeoutSeconds = 60.0, float $intervalSeconds = 1.0): array
    {
        $deadline = microtime(true) + $timeoutSeconds;
        while (true) {
            $job = $this->getJob($jobId);
            if (in_array($job['state'], $states, true) || microtime(true) >= $deadline) {
                return $job;
            }
            ($this->sleep)($intervalSeconds);
        }
    }

    /**
     * Cancel a job that has not ended. An ApiError with status 409 means it had already ended (also
     * when a retry follows a cancel that did arrive): read the job to see how.
     *
     * @return array<string, mixed>
     */
    public function cancelJob(string $jobId, string $reason): array
    {
        return $this->request('POST', '/api/v1/jobs/' . rawurlencode($jobId) . '/cancel', ['reason' => $reason], null,
                              true)[1];
    }

    /**
     * Hold a job of this client that waits in line: no worker claims it until it is resumed (it keeps
     * its due time, and so its place). An ApiError with status 409 when it does not wait in line.
     *
     * @return array<string, mixed> the job record, state `held`
     */
    public function holdJob(string $jobId, string $reason): array
    {
        return $this->request('POST', '/api/v1/jobs/' . rawurlencode($jobId) . '/hold', ['reason' => $reason], null,
                              true)[1];
    }

    /**
     * Put a held job of this client back in line; an ApiError with status 409 when it is not held.
     *
     * @return array<string, mixed> the job record, state `planned`
     */
    public function resumeJob(string $jobId, string $reason): array
    {
        return $this->request('POST', '/api/v1/jobs/' . rawurlencode($jobId) . '/resume', ['reason' => $reason], null,
                              true)[1];
    }

    /**
     * Move a job of this client that waits in line to another lane (0 most urgent, 9 bulk) and/or
     * another due time (ISO 8601, now or later); an ApiError with status 409 when it no longer waits.
     *
     * @return array<string, mixed> the job record
     */
    public function moveJob(string $jobId, string $reason, ?int $priority = null, ?string $dueAt = null): array
    {
        $body = array_filter(['priority' => $priority, 'due_at' => $dueAt, 'reason' => $reason],
                             static fn ($value) => $value !== null);
        return $this->request('POST', '/api/v1/jobs/' . rawurlencode($jobId) . '/move', $body)[1];
    }

    /**
     * Submit many jobs as one batch (idempotent per batch key: a repeat returns the batch, `created`
     * false). Each job: ['type' => …, 'payload' => [...], 'idempotency_key' => …, 'priority'?, 'source'?].
     *
     * @param list<array<string, mixed>> $jobs
     * @param array{target_finish_at?: string, correlation_id?: string} $options
     * @return array<string, mixed> the batch with its counters and `job_ids`
     */
    public function submitBatch(string $key, string $name, array $jobs, array $options = []): array
    {
        foreach ($jobs as $i => $job) {
            if (($job['payload'] ?? null) === []) {
                $jobs[$i]['payload'] = new \stdClass();
            }
        }
        [$status, $batch] = $this->request('POST', '/api/v1/batches',
                                           ['key' => $key, 'name' => $name, 'jobs' => $jobs] + $options);
        $batch['created'] = $status === 201;
        return $batch;
    }

    /** @return array<string, mixed> the batch's live counters, rate, ETA, and statistics once finished */
    public function getBatch(int $batchId): array
    {
        return $this->request('GET', '/api/v1/batches/' . $batchId)[1];
    }

    /** @return array<string, mixed> */
    public function getRecheckPlan(int $planId): array
    {
        return $this->request('GET', '/api/v1/rechecks/' . $planId)[1];
    }

    /**
     * End a recheck plan with a manual decision (needs the scope reviews:write); 409 once it ended.
     *
     * @return array<string, mixed>
     */
    public function decideRecheckPlan(int $planId, string $reason): array
    {
        return $this->request('POST', '/api/v1/rechecks/' . $planId . '/decision', ['reason' => $reason], null, true)[1];
    }

    /**
     * @param array<string, mixed>|null $body
     * @return array{0: int, 1: array<string, mixed>}
     */
    private function request(string $method, string $path, ?array $body = null, ?string $correlationId = null,
                             bool $once = false): array
    {
        $encoded = $body === null ? null : json_encode($body, JSON_UNESCAPED_SLASHES | JSON_THROW_ON_ERROR);
        $headers = ['Authorization: Bearer ' . $this->token, 'Accept: application/json',
                    'User-Agent: leitstand-php/1'];
        if ($encoded !== null) {
            $headers[] = 'Content-Type: application/json';
        }
        if ($correlationId !== null && $correlationId !== '') {
            // Refused here as the server refuses it: a line break would put lines of its own into
            // the request's headers (X-Injected: …) before the server could say no.
            if (strlen($correlationId) > 255 || !preg_match('/^[\x20-\x7e]+$/D', $correlationId)) {
                throw new \InvalidArgumentException('correlation_id must be at most 255 printable ASCII characters: '
                    . 'it travels in the X-Correlation-ID header');
            }
            $headers[] = 'X-Correlation-ID: ' . $correlationId;
        }
        if ($this->traceContext !== null) {
            $carrier = ($this->traceContext)();
            foreach (['traceparent', 'tracestate'] as $name) {
                $value = $carrier[$name] ?? '';
                if (is_string($value) && $value !== '' && !preg_match('/[\r\n]/', $value)) {
                    $headers[] = $name . ': ' . $value;
                }
            }
        }
        $lastError = '';
        for ($attempt = 1; $attempt <= $this->maxAttempts; $attempt++) {
            $this->lastAttempts = $attempt;
            $delay = $this->backoffSeconds * (2 ** ($attempt - 1)) * (0.5 + mt_rand() / mt_getrandmax());
            [$status, $responseHeaders, $text, $error] = $this->send($method, $path, $headers, $encoded);
            if ($once && ($error !== null || in_array($status, [502, 503, 504], true))) {
                // An action that is not repeatable (cancel, hold, resume, a plan's decision) may have been
                // applied before the answer was lost: sent again it would report a 409 for what succeeded.
                $what = $error ?? "HTTP $status";
                throw new NetworkError(sprintf('%s %s was sent once and not repeated (%s): it may have been '
                    . 'applied; read the job or plan to see', $method, $path, $what));
            }
            if ($error !== null) {
                $lastError = $error;  // no answer: the request may or may not have arrived
            } elseif ($status === 429 || in_array($status, [502, 503, 504], true)) {
                $lastError = "HTTP $status";
                if (isset($responseHeaders['retry-after']) && ctype_digit($responseHeaders['retry-after'])) {
                    $delay = (float) $responseHeaders['retry-after'];
                }
                if ($attempt === $this->maxAttempts) {
                    throw new ApiError($status, self::decode($text) ?? ['title' => "HTTP $status"],
                                       $responseHeaders['x-correlation-id'] ?? null);
                }
            } else {
                $this->lastCorrelationId = $responseHeaders['x-correlation-id'] ?? null;
                $this->lastTraceResponse = $responseHeaders['traceresponse'] ?? null;
                $decoded = self::decode($text);
                if ($status >= 200 && $status < 300 && $decoded !== null) {
                    return [$status, $decoded];
                }
                throw new ApiError($status, $decoded ?? ['title' => "HTTP $status", 'detail' => substr($text, 0, 200)],
                                   $this->lastCorrelationId);
            }
            if ($attempt < $this->maxAttempts) {
                ($this->sleep)(min($delay, $this->maxBackoffSeconds));
            }
        }
        throw new NetworkError(sprintf('%s %s failed after %d attempts: %s', $method, $path, $this->maxAttempts,
                                       $lastError));
    }

    /**
     * @param list<string> $headers
     * @return array{0: int, 1: array<string, string>, 2: string, 3: ?string}
     */
    private function send(string $method, string $path, array $headers, ?string $body): array
    {
        $responseHeaders = [];
        $curl = curl_init($this->baseUrl . $path);
        curl_setopt_array($curl, [
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_HTTPHEADER => $headers,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_TIMEOUT => $this->timeoutSeconds,
            CURLOPT_CONNECTTIMEOUT => $this->connectTimeoutSeconds,
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_HEADERFUNCTION => static function ($handle, string $line) use (&$responseHeaders): int {
                $pair = explode(':', $line, 2);
                if (count($pair) === 2) {
                    $responseHeaders[strtolower(trim($pair[0]))] = trim($pair[1]);
                }
                return strlen($line);
            },
        ]);
        if ($body !== null) {
            curl_setopt($curl, CURLOPT_POSTFIELDS, $body);
        }
        $text = curl_exec($curl);
        $error = $text === false ? sprintf('curl error %d: %s', curl_errno($curl), curl_error($curl)) : null;
        $status = (int) curl_getinfo($curl, CURLINFO_RESPONSE_CODE);
        curl_close($curl);
        return [$status, $responseHeaders, $text === false ? '' : (string) $text, $error];
    }

    /** @return array<string, mixed>|null */
    private static function decode(string $text): ?array
    {
        $decoded = json_decode($text, true);
        return is_array($decoded) ? $decoded : null;
    }
}
