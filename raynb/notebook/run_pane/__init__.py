"""A run's progress: its model (``model``), shown as a live ipywidgets pane (``widget``), as text
(``text``), its log view and the static summary left after.
"""
