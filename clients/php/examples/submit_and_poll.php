<?php
// Submit a crawl of one page and wait for its outcome:
//   LEITSTAND_URL=https://leitstand.example LEITSTAND_TOKEN=lst_… php examples/submit_and_poll.php https://site.example/
declare(strict_types=1);

require __DIR__ . '/../autoload.php';

$url = $argv[1] ?? exit("usage: php submit_and_poll.php PAGE_URL\n");
$leitstand = new Leitstand\Client(getenv('LEITSTAND_URL') ?: 'http://127.0.0.1:8000', (string) getenv('LEITSTAND_TOKEN'));
try {
    // The idempotency key names the business action: running this script twice makes one job.
    $job = $leitstand->submitJob('crawl', ['url' => $url], 'crawl-' . sha1($url), ['correlation_id' => 'example-' . sha1($url)]);
    printf("%s job %s (%s)\n", $job['created'] ? 'submitted' : 'already submitted:', $job['id'], $job['state']);
    $job = $leitstand->waitForJob($job['id'], ['done', 'dead', 'cancelled', 'ready_for_review'], 120.0, 2.0);
    printf("job %s is %s: %s\n", $job['id'], $job['state'], $job['completion_reason'] ?: $job['error_message']);
} catch (Leitstand\ApiError $e) {
    fprintf(STDERR, "%s\n", $e->getMessage());
    foreach ($e->invalidFields() as $field) {
        fprintf(STDERR, "  %s: %s\n", $field['field'], $field['message']);
    }
    exit(1);
} catch (Leitstand\NetworkError $e) {
    fprintf(STDERR, "%s\n", $e->getMessage());
    exit(2);
}
