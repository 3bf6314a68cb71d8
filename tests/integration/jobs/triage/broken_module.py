# Does not parse: a job module with a syntax error (imported by syntax_error.py).
def schedule(step)
    return 0.1 * 0.9 ** step
