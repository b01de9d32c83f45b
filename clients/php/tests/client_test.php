<?php
// Run by tests/test_php_client.py against a live Leitstand test server (through a proxy that loses
// the answer to the first submission). Prints one JSON line of results; exits 1 on a failed check.
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

use Leitstand\ApiError;
use Leitstand\Client;
use Leitstand\SignatureError;
use Leitstand\Webhook;

$results = [];
function check(bool $condition, string $what): void
{
    if (!$condition) {
        fwrite(STDERR, "FAILED: $what\n");
        exit(1);
    }
}

$client = new Client((string) getenv('LEITSTAND_URL'), (string) getenv('LEITSTAND_TOKEN'),
                     ['backoff_seconds' => 0.05, 'timeout_seconds' => 10]);

// 1. Submit: the first answer is lost on the way; the client retries with the same key.
$job = $client->submitJob('synthetic', ['steps' => ['fetch', 'store']], 'php-order-1', ['correlation_id' => 'php-case-1']);
$results['first_submit_attempts'] = $client->lastAttempts;
$results['first_submit_created'] = $job['created'];
$results['job_id'] = $job['id'];
check($job['correlation_id'] === 'php-case-1', 'the correlation ID is stored on the job');

// 2. The same request again (same key, payload and options): the same job, not a second one.
$again = $client->submitJob('synthetic', ['steps' => ['fetch', 'store']], 'php-order-1', ['correlation_id' => 'php-case-1']);
check($again['id'] === $job['id'] && $again['created'] === false, 'a repeated submission returns the same job');

// 3. Read it back.
$read = $client->getJob($job['id']);
check($read['id'] === $job['id'] && $read['type'] === 'synthetic', 'the job reads back');
check(count($read['transitions']) >= 1, 'the record has its transitions');
check($read['logs'] === null && is_array($client->getJob($job['id'], true)['logs']), 'log lines only when asked');
$results['state'] = $read['state'];

// 3b. Move it in line: to the most urgent lane.
$moved = $client->moveJob($job['id'], 'the customer is waiting', 0);
check($moved['priority'] === 0 && $moved['state'] === 'planned', 'a waiting job moves to another lane');

// 3c. Hold it and resume it; resuming it again is a 409.
check($client->holdJob($job['id'], 'the customer asked us to wait')['state'] === 'held', 'a waiting job is held');
check($client->resumeJob($job['id'], 'the customer is ready')['state'] === 'planned', 'a held job is resumed');
try {
    $client->resumeJob($job['id'], 'twice');
    check(false, 'a job that is not held cannot be resumed');
} catch (ApiError $e) {
    check($e->status() === 409, 'resuming a job that is not held is a 409');
}

// 4. The same key with another payload: 422 naming the field.
try {
    $client->submitJob('synthetic', ['steps' => ['other']], 'php-order-1');
    check(false, 'a reused key with another payload is refused');
} catch (ApiError $e) {
    check($e->status() === 422 && $e->invalidFields()[0]['field'] === 'idempotency_key', 'the conflict names the key');
}

// 5. Listing by correlation ID, through the cursor.
$found = [];
foreach ($client->eachJob(['correlation_id' => 'php-case-1', 'limit' => 1]) as $listed) {
    $found[] = $listed['id'];
}
check($found === [$job['id']], 'the job is listed under its correlation ID');

// 6. A wrong token: 401 as a problem document.
$stranger = new Client((string) getenv('LEITSTAND_URL'), 'lst_nope_nope', ['max_attempts' => 1]);
try {
    $stranger->getJob($job['id']);
    check(false, 'a wrong token is refused');
} catch (ApiError $e) {
    check($e->status() === 401 && $e->problem['title'] === 'Unauthorized', 'a wrong token gets 401');
}

// 6b. A batch, submitted twice with the same key: one batch.
$jobs = [['type' => 'synthetic', 'payload' => [], 'idempotency_key' => 'php-batch-1-a'],
         ['type' => 'synthetic', 'payload' => ['steps' => ['x']], 'idempotency_key' => 'php-batch-1-b']];
$batch = $client->submitBatch('php-batch-1', 'PHP import', $jobs);
$repeat = $client->submitBatch('php-batch-1', 'PHP import', $jobs);
check($batch['created'] && !$repeat['created'] && $repeat['id'] === $batch['id'], 'a batch is submitted once per key');
check($client->getBatch($batch['id'])['counters']['total'] === 2, 'the batch counts its two jobs');
$results['batch_id'] = $batch['id'];

// 6c. A caller with a trace: the client sends its W3C context, the job keeps the trace.
$traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
$traced = new Client((string) getenv('LEITSTAND_URL'), (string) getenv('LEITSTAND_TOKEN'),
                     ['backoff_seconds' => 0.05, 'trace_context' => static fn (): array => [
                         'traceparent' => $traceparent, 'tracestate' => "vendor=php\r\nX-Injected: 1"]]);
$tracedJob = $traced->submitJob('synthetic', [], 'php-traced-1');
check($tracedJob['trace_id'] === '4bf92f3577b34da6a3ce929d0e0e4736', 'the job keeps the caller\'s trace ID');
check($traced->lastTraceResponse === $traceparent, 'the answer names the trace the request ran in');
check($client->getJob($tracedJob['id'])['trace_id'] === '4bf92f3577b34da6a3ce929d0e0e4736', 'its record shows it');
$results['traced_job_id'] = $tracedJob['id'];

// 7. Signature checks on a delivery signed here as Leitstand signs it.
$secret = (string) getenv('LEITSTAND_WEBHOOK_SECRET');
$body = '{"id":"evt_1","type":"job.done"}';
$now = time();
$header = 't=' . $now . ',v1=' . hash_hmac('sha256', $now . '.' . $body, $secret);
check(Webhook::verify($secret, $header, $body)['id'] === 'evt_1', 'a correct signature verifies');
foreach ([[$header, $body . ' '], [$header, str_replace('done', 'dead', $body)], [null, $body],
          ['t=' . ($now - 3600) . ',v1=' . hash_hmac('sha256', ($now - 3600) . '.' . $body, $secret), $body]] as [$h, $b]) {
    try {
        Webhook::verify($secret, $h, $b);
        check(false, 'a tampered, unsigned or old delivery is rejected');
    } catch (SignatureError $e) {
        $results['rejected'][] = $e->getMessage();
    }
}

echo json_encode($results), "\n";
