"""The procedural skills: each draws one item at a difficulty level from 1 to 5.

Every skill returns a short question, an integer answer and a worked solution of a
few plain-text lines ending in `\\boxed{answer}`. Solutions are deliberately terse
(about 100-200 characters at level 3): tiny models are supervised on them and then
sample them on CPU. Answers come from wide ranges (documented per skill by
`answer_range`) so a model cannot score by guessing a constant.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    question: str
    answer: int
    solution: str


@dataclass(frozen=True)
class Skill:
    make: Callable[[random.Random, int], Item]
    answer_range: Callable[[int], tuple[int, int]]  # level -> inclusive (low, high)


def _digits(count: int) -> tuple[int, int]:
    """Inclusive range of the integers with exactly `count` digits."""
    return 10 ** (count - 1), 10**count - 1


def _reversed_digits(number: int) -> list[int]:
    return [int(digit) for digit in reversed(str(number))]


def _division_line(dividend: int, divisor: int) -> str:
    return f"{dividend} = {dividend // divisor}*{divisor} + {dividend % divisor}"


# addition: a (level+1 digits) + b (one digit fewer, or as many)
def _addition_operands(level: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return _digits(level + 1), (10 ** (level - 1), 10 ** (level + 1) - 1)


def _addition(rng: random.Random, level: int) -> Item:
    a_range, b_range = _addition_operands(level)
    a, b = rng.randint(*a_range), rng.randint(*b_range)
    a_digits, b_digits = _reversed_digits(a), _reversed_digits(b)
    lines, carry = [], 0
    for column, a_digit in enumerate(a_digits):
        terms = [a_digit] + b_digits[column : column + 1] + ([carry] if carry else [])
        total = sum(terms)
        working = "+".join(map(str, terms)) + f"={total}" if len(terms) > 1 else str(total)
        if column == len(a_digits) - 1:
            lines.append(f"{working}, write {total}")
        else:
            carry = total // 10
            lines.append(f"{working}, write {total % 10}" + (", carry 1" if carry else ""))
    lines.append(f"{a} + {b} = \\boxed{{{a + b}}}")
    return Item(f"Compute {a} + {b}.", a + b, "\n".join(lines))


def _addition_range(level: int) -> tuple[int, int]:
    (a_low, a_high), (b_low, b_high) = _addition_operands(level)
    return a_low + b_low, a_high + b_high


# subtraction: same operands as addition; from level 3 the result may be negative
def _subtraction(rng: random.Random, level: int) -> Item:
    a_range, b_range = _addition_operands(level)
    a, b = rng.randint(*a_range), rng.randint(*b_range)
    if level <= 2 and a < b:
        a, b = b, a
    top, bottom = max(a, b), min(a, b)
    lines = [] if a >= b else [f"{a} < {b}, so compute {b} - {a} and negate"]
    bottom_digits, borrow = _reversed_digits(bottom), 0
    for column, top_digit in enumerate(_reversed_digits(top)):
        subtracted = ([borrow] if borrow else []) + bottom_digits[column : column + 1]
        value = top_digit - sum(subtracted)
        new_borrow = int(value < 0)
        value += 10 * new_borrow
        working = "-".join(map(str, [top_digit + 10 * new_borrow, *subtracted]))
        line = f"{working}={value}" if subtracted else str(value)
        lines.append(line + (", borrow 1" if new_borrow else ""))
        borrow = new_borrow
    lines.append(f"{a} - {b} = \\boxed{{{a - b}}}")
    return Item(f"Compute {a} - {b}.", a - b, "\n".join(lines))


def _subtraction_range(level: int) -> tuple[int, int]:
    (a_low, a_high), (b_low, b_high) = _addition_operands(level)
    return (0 if level <= 2 else a_low - b_high), a_high - b_low


# multiplication: multi-digit times 1 digit (levels 1-2) or 2 digits (levels 3-5)
_MULTIPLICAND_DIGITS = (2, 3, 3, 4, 5)


def _multiplication_operands(level: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return _digits(_MULTIPLICAND_DIGITS[level - 1]), ((2, 9) if level <= 2 else (11, 99))


def _multiplication(rng: random.Random, level: int) -> Item:
    a_range, b_range = _multiplication_operands(level)
    a, b = rng.randint(*a_range), rng.randint(*b_range)
    lines, partials = [], []
    for b_power, b_digit in enumerate(_reversed_digits(b)):
        if b_digit == 0:
            continue
        place = b_digit * 10**b_power
        terms = [
            a_digit * 10**a_power * place
            for a_power, a_digit in reversed(list(enumerate(_reversed_digits(a))))
            if a_digit
        ]
        expansion = "+".join(map(str, terms)) + "=" if len(terms) > 1 else ""
        lines.append(f"{a}*{place}={expansion}{a * place}")
        partials.append(a * place)
    if len(partials) > 1:
        lines.append("+".join(map(str, partials)) + f"={a * b}")
    lines.append(f"{a} * {b} = \\boxed{{{a * b}}}")
    return Item(f"Compute {a} * {b}.", a * b, "\n".join(lines))


def _multiplication_range(level: int) -> tuple[int, int]:
    (a_low, a_high), (b_low, b_high) = _multiplication_operands(level)
    return a_low * b_low, a_high * b_high


# modular: a mod m with a quotient of `level` digits (levels 1-2), (a*b) mod m
# (levels 3-5). For a product the modulus is prime and neither factor a multiple of
# it, so the answer is spread over 1..m-1 instead of piling up at 0 (zero divisors
# of composite m). Moduli start at 20 (23 for primes): small moduli make small
# residues common enough to guess.
# level -> (smallest modulus, largest modulus)
_MODULI = {1: (20, 49), 2: (20, 99), 3: (23, 60), 4: (23, 80), 5: (23, 99)}


def _is_prime(number: int) -> bool:
    return number > 1 and all(number % d for d in range(2, math.isqrt(number) + 1))


def _operand(rng: random.Random, digits: int, modulus: int) -> int:
    """A `digits`-digit number above `modulus` that `modulus` does not divide."""
    low, high = _digits(digits)
    while True:
        number = rng.randint(max(low, modulus + 1), high)
        if number % modulus:
            return number


def _modular(rng: random.Random, level: int) -> Item:
    if level <= 2:
        # Remainder and quotient are drawn, not a: drawing a favours small remainders.
        modulus = rng.randint(*_MODULI[level])
        remainder = rng.randrange(modulus)
        a = rng.randint(*_digits(level)) * modulus + remainder
        question, result = f"Compute {a} mod {modulus}.", a % modulus
        expression = f"{a} mod {modulus}"
        lines = [_division_line(a, modulus)]
    else:
        low, high = _MODULI[level]
        primes = [n for n in range(low, high + 1) if _is_prime(n)]
        modulus = rng.choice(primes)
        a, b = _operand(rng, level + 1, modulus), _operand(rng, level - 1, modulus)
        product = (a % modulus) * (b % modulus)
        lines = [
            _division_line(a, modulus),
            _division_line(b, modulus),
            f"{a % modulus}*{b % modulus}={product}",
            _division_line(product, modulus),
        ]
        question, result = f"Compute ({a} * {b}) mod {modulus}.", product % modulus
        expression = f"({a} * {b}) mod {modulus}"
    lines.append(f"{expression} = \\boxed{{{result}}}")
    return Item(question, result, "\n".join(lines))


def _modular_range(level: int) -> tuple[int, int]:
    return 0, _MODULI[level][1] - 1


# linear_equation: a*x + b = c; sizes grow and signs appear with the level
# level -> (largest |a|, lowest x, highest x, largest |b|)
_LINEAR_SIZES = {
    1: (9, 1, 40, 20),
    2: (12, 1, 99, 99),
    3: (19, -50, 99, 99),
    4: (29, -200, 200, 999),
    5: (49, -500, 500, 9999),
}


def _linear_equation(rng: random.Random, level: int) -> Item:
    a_max, x_low, x_high, b_max = _LINEAR_SIZES[level]
    a = rng.randint(2, a_max) * (rng.choice((-1, 1)) if level >= 4 else 1)
    x = rng.randint(x_low, x_high)
    b = rng.randint(1, b_max) * (rng.choice((-1, 1)) if level >= 3 else 1)
    c = a * x + b
    sign, magnitude = ("+", b) if b > 0 else ("-", -b)
    undo = "-" if b > 0 else "+"
    divisor = str(a) if a > 0 else f"({a})"
    solution = f"{a}x = {c} {undo} {magnitude} = {c - b}\nx = {c - b} / {divisor} = \\boxed{{{x}}}"
    return Item(f"Solve for x: {a}x {sign} {magnitude} = {c}.", x, solution)


def _linear_equation_range(level: int) -> tuple[int, int]:
    _, x_low, x_high, _ = _LINEAR_SIZES[level]
    return x_low, x_high


# gcd: g*p and g*q with p, q coprime, so the answer g is spread, not mostly 1
# level -> (largest g, largest cofactor)
_GCD_SIZES = {1: (40, 9), 2: (50, 30), 3: (60, 60), 4: (99, 150), 5: (199, 400)}


def _gcd(rng: random.Random, level: int) -> Item:
    g_max, cofactor_max = _GCD_SIZES[level]
    g = rng.randint(2, g_max)
    while True:
        p, q = rng.randint(2, cofactor_max), rng.randint(2, cofactor_max)
        if p != q and math.gcd(p, q) == 1:
            break
    a, b = g * p, g * q
    lines = []
    larger, smaller = max(a, b), min(a, b)
    while smaller:
        lines.append(_division_line(larger, smaller))
        larger, smaller = smaller, larger % smaller
    lines.append(f"gcd({a}, {b}) = \\boxed{{{g}}}")
    return Item(f"Compute gcd({a}, {b}).", g, "\n".join(lines))


def _gcd_range(level: int) -> tuple[int, int]:
    return 2, _GCD_SIZES[level][0]


SKILL_SPECS: dict[str, Skill] = {
    "addition": Skill(_addition, _addition_range),
    "subtraction": Skill(_subtraction, _subtraction_range),
    "multiplication": Skill(_multiplication, _multiplication_range),
    "modular": Skill(_modular, _modular_range),
    "linear_equation": Skill(_linear_equation, _linear_equation_range),
    "gcd": Skill(_gcd, _gcd_range),
}
