<?php

declare(strict_types=1);

namespace Leitstand;

/** A webhook delivery whose signature is missing, malformed, wrong or too old: reject it (401). */
final class SignatureError extends \RuntimeException
{
}
