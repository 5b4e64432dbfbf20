"""Operations: lag evaluation, rewind detection, broker health, balance planning, throttling.

Evaluators and planners here are pure (plain data in, typed findings out); sampling and actions
live at the edges that call them.
"""
