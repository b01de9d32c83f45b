<?php

declare(strict_types=1);

namespace Leitstand\Tests;

use Leitstand\ApiError;
use Leitstand\Client;
use PHPUnit\Framework\TestCase;

/**
 * Against a live Leitstand server: `LEITSTAND_URL` (tests/api/test_php_client.py puts a proxy in
 * front that loses the answer to the first submission) and `LEITSTAND_TOKEN`. The tests run in this
 * order, each on what the one before made; what the Python side checks in the database afterwards
 * is written as JSON to `LEITSTAND_RESULTS`.
 */
final class LiveServerTest extends TestCase
{
    private const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

    /** @var array<string, mixed> */
    private static array $results = [];

    protected function setUp(): void
    {
        if ((string) getenv('LEITSTAND_URL') === '') {
            $this->markTestSkipped('LEITSTAND_URL names no live server (tests/api/test_php_client.py starts one)');
        }
    }

    public static function tearDownAfterClass(): void
    {
        $file = (string) getenv('LEITSTAND_RESULTS');
        if ($file !== '' && self::$results !== []) {
            file_put_contents($file, json_encode(self::$results));
        }
    }

    private static function client(array $options = []): Client
    {
        return new Client((string) getenv('LEITSTAND_URL'), (string) getenv('LEITSTAND_TOKEN'),
                          $options + ['backoff_seconds' => 0.05, 'timeout_seconds' => 10]);
    }

    public function testASubmissionWhoseAnswerIsLostIsRetriedWithItsKey(): string
    {
        $client = self::client();
        $job = $client->submitJob('synthetic', ['steps' => ['fetch', 'store']], 'php-order-1',
                                  ['correlation_id' => 'php-case-1']);
        self::$results['first_submit_attempts'] = $client->lastAttempts;
        self::$results['first_submit_created'] = $job['created'];
        self::$results['job_id'] = $job['id'];
        $this->assertSame('php-case-1', $job['correlation_id']);

        $again = $client->submitJob('synthetic', ['steps' => ['fetch', 'store']], 'php-order-1',
                                    ['correlation_id' => 'php-case-1']);
        $this->assertSame($job['id'], $again['id'], 'a repeated submission returns the same job');
        $this->assertFalse($again['created']);
        return $job['id'];
    }

    /** @depends testASubmissionWhoseAnswerIsLostIsRetriedWithItsKey */
    public function testTheJobReadsBackWithItsHistoryAndLogsOnlyWhenAsked(string $jobId): string
    {
        $client = self::client();
        $read = $client->getJob($jobId);
        $this->assertSame('synthetic', $read['type']);
        $this->assertGreaterThanOrEqual(1, count($read['transitions']));
        $this->assertNull($read['logs']);
        $this->assertIsArray($client->getJob($jobId, true)['logs']);
        return $jobId;
    }

    /** @depends testTheJobReadsBackWithItsHistoryAndLogsOnlyWhenAsked */
    public function testAWaitingJobIsMovedHeldAndResumed(string $jobId): string
    {
        $client = self::client();
        $moved = $client->moveJob($jobId, 'the customer is waiting', 0);
        $this->assertSame([0, 'planned'], [$moved['priority'], $moved['state']]);
        $this->assertSame('held', $client->holdJob($jobId, 'the customer asked us to wait')['state']);
        $this->assertSame('planned', $client->resumeJob($jobId, 'the customer is ready')['state']);
        try {
            $client->resumeJob($jobId, 'twice');
            $this->fail('a job that is not held cannot be resumed');
        } catch (ApiError $e) {
            $this->assertSame(409, $e->status());
        }
        return $jobId;
    }

    /** @depends testAWaitingJobIsMovedHeldAndResumed */
    public function testAKeyReusedWithAnotherPayloadIsA422NamingTheKey(string $jobId): void
    {
        try {
            self::client()->submitJob('synthetic', ['steps' => ['other']], 'php-order-1');
            $this->fail('a reused key with another payload is refused');
        } catch (ApiError $e) {
            $this->assertSame(422, $e->status());
            $this->assertSame('idempotency_key', $e->invalidFields()[0]['field']);
        }
        $found = [];
        foreach (self::client()->eachJob(['correlation_id' => 'php-case-1', 'limit' => 1]) as $listed) {
            $found[] = $listed['id'];
        }
        $this->assertSame([$jobId], $found, 'the job is listed under its correlation ID, through the cursor');
    }

    /** @depends testASubmissionWhoseAnswerIsLostIsRetriedWithItsKey */
    public function testAWrongTokenGetsA401ProblemDocument(string $jobId): void
    {
        $stranger = new Client((string) getenv('LEITSTAND_URL'), 'lst_nope_nope', ['max_attempts' => 1]);
        try {
            $stranger->getJob($jobId);
            $this->fail('a wrong token is refused');
        } catch (ApiError $e) {
            $this->assertSame(401, $e->status());
            $this->assertSame('Unauthorized', $e->problem['title']);
        }
    }

    public function testABatchIsSubmittedOncePerKey(): void
    {
        $client = self::client();
        $jobs = [['type' => 'synthetic', 'payload' => [], 'idempotency_key' => 'php-batch-1-a'],
                 ['type' => 'synthetic', 'payload' => ['steps' => ['x']], 'idempotency_key' => 'php-batch-1-b']];
        $batch = $client->submitBatch('php-batch-1', 'PHP import', $jobs);
        $repeat = $client->submitBatch('php-batch-1', 'PHP import', $jobs);
        $this->assertTrue($batch['created']);
        $this->assertFalse($repeat['created']);
        $this->assertSame($batch['id'], $repeat['id']);
        $this->assertSame(2, $client->getBatch($batch['id'])['counters']['total']);
        self::$results['batch_id'] = $batch['id'];
    }

    public function testACallersTraceIsSentAndKeptOnTheJob(): void
    {
        $traced = self::client(['trace_context' => static fn (): array => [
            'traceparent' => self::TRACEPARENT, 'tracestate' => "vendor=php\r\nX-Injected: 1"]]);
        $job = $traced->submitJob('synthetic', [], 'php-traced-1');
        $this->assertSame('4bf92f3577b34da6a3ce929d0e0e4736', $job['trace_id']);
        $this->assertSame(self::TRACEPARENT, $traced->lastTraceResponse, 'the answer names the trace');
        $this->assertSame('4bf92f3577b34da6a3ce929d0e0e4736', self::client()->getJob($job['id'])['trace_id']);
        self::$results['traced_job_id'] = $job['id'];
    }
}
