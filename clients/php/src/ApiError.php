<?php

declare(strict_types=1);

namespace Leitstand;

/**
 * The API answered with a problem (RFC 9457): the status, the problem document and, for invalid
 * input, the fields at fault. Thrown for every non-2xx answer that is not retried.
 */
final class ApiError extends \RuntimeException
{
    /** @var array<string, mixed> */
    public array $problem;
    public ?string $correlationId;

    /** @param array<string, mixed> $problem */
    public function __construct(int $status, array $problem, ?string $correlationId = null)
    {
        $this->problem = $problem;
        $this->correlationId = $correlationId;
        $detail = $problem['detail'] ?? ($problem['title'] ?? 'no detail');
        parent::__construct(sprintf('Leitstand API %d: %s', $status, (string) $detail), $status);
    }

    public function status(): int
    {
        return $this->getCode();
    }

    /** @return list<array{field: string, message: string}> */
    public function invalidFields(): array
    {
        return $this->problem['invalid_fields'] ?? [];
    }
}
